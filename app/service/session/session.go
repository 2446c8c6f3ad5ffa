// Package session is what every command that acts runs under: the
// four-eyes settings kept in the backend (checked against the console key
// this host pins), the audit trail they name with the proposals beside it,
// the person acting (by her own key where the trail is signed), each
// action audited before and as it is done, and the refusal of an action
// the policy wants proposed.
package session

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// Options are what a command was given: its --audit-file,
// --approval-required, --operator-key-file, --operator-token-file,
// --approval-ttl and --batch.
type Options struct {
	// File is the audit trail ("": none, where the backend keeps no
	// settings; the one they name where it does).
	File string
	// Policy is the four-eyes policy given ("": none; another than the
	// kept one is refused).
	Policy string
	// KeyFile is the operator's own Ed25519 key ("": none: she does not
	// act where the trail is signed).
	KeyFile string
	// TokenFile is retired: given, it is refused.
	TokenFile string
	// TTL is how long a proposal waits (0: approval's default); at most
	// what the kept settings allow.
	TTL time.Duration
	// Batch is how many targets a run acts on between two saves (0:
	// approval's default; at most 500).
	Batch int
	// Head, when set, logs every line appended with its seq and hash
	// (LogHead): the anchor audit verify --head checks.
	Head io.Writer
}

// Bind binds the options' flags, shared by every command that acts (and
// named as the console's): --audit-file, --approval-required,
// --approval-ttl (default 24h), --operator-key-file and the retired
// --operator-token-file.
func (o *Options) Bind(f *cli.FlagSet) {
	f.String(&o.File, "audit-file", "IC_AUDIT_FILE", "", "the audit trail, shared with the console: every action a hash-chained JSON line, synced before it is done (where the backend keeps four-eyes settings, the trail they name: another is refused)")
	f.String(&o.Policy, "approval-required", "IC_APPROVAL_REQUIRED", "", "four-eyes: the policy kept in the backend by the console (reopen-new-attempt, redrive-force, reconcile-adopt, bulk>N, all, represent-hard-decline); a process given another is refused. The backend's policy holds whether this is given or not")
	f.Duration(&o.TTL, "approval-ttl", "IC_APPROVAL_TTL", 24*time.Hour, "how long a proposal waits for approval, and an approved one for its run (at most what the kept settings allow, 72h by default)")
	f.String(&o.KeyFile, "operator-key-file", "IC_OPERATOR_KEY_FILE", "", "your own Ed25519 key (an owner-only file of yours; chargerecovery keygen writes one, and its public key goes on your line of the console's token file): it names you and signs your audit lines, where the backend keeps four-eyes settings")
	f.String(&o.TokenFile, "operator-token-file", "IC_OPERATOR_TOKEN_FILE", "", "retired: the command line signs with your own key (--operator-key-file)")
}

// Session is the trail, the book and the policy a command acts under.
// Trail and Book are nil where the backend keeps no settings and no
// trail was given (four-eyes off, nothing audited).
type Session struct {
	Trail  *audit.Trail
	Book   *approval.Book
	Policy approval.Policy

	kept *approval.Settings // the settings kept in the backend (nil: none)
	me   *approval.Operator // whose KeyFile it is
}

// Close closes the trail (if any).
func (s *Session) Close() error { return s.Trail.Close() }

// Open reads the four-eyes settings kept in the backend (load: what
// LoadKept reads), whatever the command was given, and opens the trail
// they name with the proposals beside it. Where none are kept: the trail
// given (none: no trail, no book, the policy off), unsigned; a policy
// asking for four-eyes is then refused (only the console's key keeps one).
// Bad options are usage errors (cli.Usagef), found before load is called.
func Open(ctx context.Context, o Options, load func(context.Context) (approval.Settings, bool, error)) (*Session, error) {
	if o.TokenFile != "" {
		return nil, cli.Usagef("--operator-token-file (IC_OPERATOR_TOKEN_FILE) is retired: the command line names you by your own key, --operator-key-file (chargerecovery keygen writes one; its public key goes on your line of the console's token file)")
	}
	var given *approval.Policy
	if strings.TrimSpace(o.Policy) != "" {
		p, err := approval.ParsePolicy(o.Policy)
		if err != nil {
			return nil, cli.Usagef("%v", err)
		}
		given = &p
	}
	if o.Batch < 0 || o.Batch > 500 {
		return nil, cli.Usagef("--batch must be between 1 and 500")
	}
	if o.TTL < 0 {
		return nil, cli.Usagef("--approval-ttl %s is negative", o.TTL)
	}
	cur, ok, err := load(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return openUnsigned(o, given)
	}
	policy, err := approval.PolicyOf(cur)
	if err != nil {
		return nil, err
	}
	if given != nil && *given != policy {
		return nil, cli.Usagef("--approval-required: %v: the backend keeps %s, this process was given %s; the policy is the console's configuration", approval.ErrPolicy, policy, *given)
	}
	if o.File != "" {
		abs, err := filepath.Abs(o.File)
		if err != nil || abs != cur.Trail {
			return nil, cli.Usagef("--audit-file %s is not the trail the backend's four-eyes settings name (%s): every action goes to that one", o.File, cur.Trail)
		}
	}
	if o.TTL > cur.TTLBound() {
		return nil, cli.Usagef("--approval-ttl %s is longer than the %s the kept settings allow", o.TTL, cur.TTLBound())
	}
	ring, err := cur.Keyring()
	if err != nil {
		return nil, err
	}
	t, err := audit.Open(cur.Trail)
	if err != nil {
		return nil, fmt.Errorf("the audit trail the backend's settings name: %w", err)
	}
	s := &Session{Trail: t, Policy: policy, kept: &cur}
	t.RequireSign, t.SettingsVersion = true, cur.Version
	LogHead(t, o.Head)
	if err := s.signed(o, ring); err != nil {
		t.Close()
		return nil, err
	}
	if s.Book, err = approval.Open(t, approval.Options{Policy: &policy, Keys: ring, TTL: o.TTL, Batch: o.Batch}); err != nil {
		t.Close()
		return nil, err
	}
	return s, nil
}

// openUnsigned is Open where the backend keeps no settings.
func openUnsigned(o Options, given *approval.Policy) (*Session, error) {
	if given != nil && given.On() {
		return nil, cli.Usagef("--approval-required: %v: this backend keeps no four-eyes settings; four-eyes is the console's configuration (--approval-required with --console-key-file), kept in the backend, never one command's flag", approval.ErrPolicy)
	}
	if o.TTL > approval.DefaultMaxTTL {
		return nil, cli.Usagef("--approval-ttl %s is longer than %s", o.TTL, approval.DefaultMaxTTL)
	}
	if o.File == "" {
		return &Session{Policy: approval.Off}, nil
	}
	t, err := audit.Open(o.File)
	if err != nil {
		return nil, fmt.Errorf("--audit-file: %w", err)
	}
	LogHead(t, o.Head)
	book, err := approval.Open(t, approval.Options{TTL: o.TTL, Batch: o.Batch})
	if err != nil {
		t.Close()
		return nil, err
	}
	return &Session{Trail: t, Book: book, Policy: approval.Off}, nil
}

// signed checks the signed trail against the kept settings and, with
// o.KeyFile, has the operator's key sign what s.Trail appends.
func (s *Session) signed(o Options, ring audit.Keyring) error {
	// The console's own lines remember the versions it kept: the backend
	// keeping an older one was rolled back in the database (lines an
	// operator signed do not count: she could stamp any number).
	if top, err := s.Trail.ConsoleSettings(ring); err != nil {
		return fmt.Errorf("the audit trail the backend's settings name: %w", err)
	} else if top > s.kept.Version {
		return fmt.Errorf("%w: the backend keeps four-eyes settings version %d, and the console's lines in the trail were written under version %d: the settings were rolled back in the database; nothing is done until the console's start keeps them again", approval.ErrSettings, s.kept.Version, top)
	}
	if o.KeyFile == "" {
		return nil
	}
	key, err := audit.ReadOwnPrivateKeyFile(o.KeyFile)
	if err != nil {
		return cli.Usagef("--operator-key-file: %v", err)
	}
	pub := key.Public().(ed25519.PublicKey)
	op, ok := s.kept.OperatorByKey(pub)
	if !ok {
		return fmt.Errorf("--operator-key-file: key %s is not one the backend's settings keep (the console keeps the keys on its token file's lines, at its start): ask for your public key (%s) to be put on your line", audit.KeyID(pub), audit.PublicKeyString(pub))
	}
	s.me = &op
	s.Trail.Sign = &audit.Signer{Name: op.Name, Key: key}
	return nil
}

// Who is the person acting. Where the backend keeps four-eyes settings a
// name given on the command line is not enough (anyone can give
// another's): the person is the one whose key Options.KeyFile holds; with
// proxy sign-in the command line does not act at all (the identity
// provider names people, in the console). needs is the proposal's
// approver requirement, if one is decided ("": none).
func (s *Session) Who(env *cli.Env, opFlag, needs string) (approval.Actor, error) {
	if s.kept == nil {
		if needs != "" {
			return approval.Actor{}, errors.New("this proposal needs another operator's approval, and this backend keeps no four-eyes settings to name her by: approve it in the console")
		}
		name, err := cli.WhoActs(env, opFlag)
		return approval.Actor{Name: name, Role: "operator", Via: "cli"}, err
	}
	if s.kept.SignIn == "proxy" {
		return approval.Actor{}, errors.New("this installation signs people in through its proxy (the identity provider names them): the command line does not act; act in the console")
	}
	if s.me == nil {
		return approval.Actor{}, cli.Usagef("this installation's audit trail is signed: the command line names you by your own key, --operator-key-file (IC_OPERATOR_KEY_FILE), or act in the console")
	}
	if s.me.Role != "operator" {
		return approval.Actor{}, fmt.Errorf("%s is a %s: only operators act", s.me.Name, s.me.Role)
	}
	if n := strings.TrimSpace(opFlag); n != "" && !strings.EqualFold(n, s.me.Name) {
		return approval.Actor{}, cli.Usagef("--operator %s is not whom the key names (%s)", n, s.me.Name)
	}
	return approval.Actor{Name: s.me.Name, Role: s.me.Role, Via: "cli"}, nil
}

// Rotate moves the trail to `to` and goes on in a new file at its path,
// chained to it, its first line naming who rotates (Who).
func (s *Session) Rotate(env *cli.Env, opFlag, to string) (audit.Entry, error) {
	if s.Book == nil {
		return audit.Entry{}, cli.Usagef("give the trail: --audit-file FILE (IC_AUDIT_FILE)")
	}
	who, err := s.Who(env, opFlag, "")
	if err != nil {
		return audit.Entry{}, err
	}
	return s.Trail.Rotate(to, audit.Entry{Operator: who.Name, Role: who.Role, Via: "cli"})
}

// PinFile is where a host pins the console's public key (root's, not
// writable by operators): the settings in the backend must be signed by
// it, and must be there. Someone who can write the database cannot then
// delete the settings (four-eyes "off"), roll them back past the pin, or
// put a version 1 of her own there.
const PinFile = "/etc/chargerecovery/console.pub"

// Pin is the console key this host pins: file (PinFile in production)
// when it exists (nothing else counts then), else IC_CONSOLE_PUBLIC_KEY
// as getenv reads it (an installation without /etc, and the tests: an
// operator who can change her environment can drop that one), else none.
func Pin(file string, getenv func(string) string) (ed25519.PublicKey, error) {
	raw, err := readPin(file)
	switch {
	case err == nil:
		pub, err := audit.ParsePublicKey(string(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return pub, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err // it names the file
	}
	if v := strings.TrimSpace(getenv("IC_CONSOLE_PUBLIC_KEY")); v != "" {
		pub, err := audit.ParsePublicKey(v)
		if err != nil {
			return nil, cli.Usagef("IC_CONSOLE_PUBLIC_KEY: %v", err)
		}
		return pub, nil
	}
	return nil, nil
}

// geteuid is the user the process acts as (a test's seam).
var geteuid = os.Geteuid

// readPin reads the pin file as opened: refused if others may write it,
// or if it is the acting user's own (she could rewrite it: a pin of her
// making pins her own key), unless she is root.
func readPin(file string) ([]byte, error) {
	return secretfile.ReadChecked(file, func(st fs.FileInfo) error {
		if st.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s is writable by others (mode %04o): a pin anyone can change pins nothing; chmod 644 it, owned by root", file, st.Mode().Perm())
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) == geteuid() {
			return fmt.Errorf("%s is owned by you (uid %d): a pin you can rewrite pins nothing; it is root's (chown root, chmod 644)", file, sys.Uid)
		}
		return nil
	})
}

// LoadKept reads the four-eyes settings kept in store, checked against
// pin (nil: none pinned); ok is false where none are kept.
func LoadKept(ctx context.Context, store driver.Store, pin ed25519.PublicKey) (approval.Settings, bool, error) {
	ks, err := approval.OpenKept(store, nil)
	if err != nil {
		return approval.Settings{}, false, err
	}
	return ks.Load(ctx, pin)
}

// LoadPinned reads the four-eyes settings kept in the backend open opens
// (and closes), checked against the console key this host pins (Pin of
// PinFile and getenv's IC_CONSOLE_PUBLIC_KEY), read first.
func LoadPinned(ctx context.Context, getenv func(string) string, open func() (*backend.Backend, error)) (approval.Settings, bool, error) {
	pin, err := Pin(PinFile, getenv)
	if err != nil {
		return approval.Settings{}, false, err
	}
	b, err := open()
	if err != nil {
		return approval.Settings{}, false, err
	}
	defer b.Close()
	return LoadKept(ctx, b.Store, pin)
}

// Keyring is the keys that vouch for the trail's lines where settings are
// kept (ok), and the version kept; nil and 0 where none are.
func Keyring(cur approval.Settings, ok bool) (audit.Keyring, int, error) {
	if !ok {
		return nil, 0, nil
	}
	ring, err := cur.Keyring()
	if err != nil {
		return nil, 0, err
	}
	return ring, cur.Version, nil
}

// LogHead has every line t appends logged on w (nil: not logged) with its
// seq and hash: the anchor, kept apart from the file, that audit verify
// --head checks.
func LogHead(t *audit.Trail, w io.Writer) {
	if w == nil {
		return
	}
	log := slog.New(slog.NewJSONHandler(w, nil))
	t.Head = func(seq int64, hash string) { log.Info("audit head", "seq", seq, "sha256", hash) }
}

// trailWriter passes the command's audit lines (slog JSON, "audit":true)
// on to w and appends each to the trail as an audit.Entry.
type trailWriter struct {
	w     io.Writer
	trail *audit.Trail
	who   approval.Actor
	err   error
}

func (t *trailWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if t.trail == nil {
		return n, err
	}
	var m map[string]any
	if json.Unmarshal(p, &m) != nil || m["audit"] != true {
		return len(p), nil
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	e := audit.Entry{Operator: t.who.Name, Role: t.who.Role, Via: "cli", Action: str("action"), Result: str("result"),
		ChargeID: str("charge_id"), Reason: str("reason"), Detail: str("msg")}
	if l, ok := m["charges"].([]any); ok {
		for _, v := range l {
			if s, ok := v.(string); ok {
				e.Charges = append(e.Charges, s)
			}
		}
	}
	if b := str("bank_key"); b != "" {
		e.Detail += "; bank key " + b
	}
	if _, err := t.trail.Append(e); err != nil && t.err == nil {
		t.err = err
	}
	return len(p), nil
}

// Act runs act with its audit lines (slog JSON lines with "audit":true,
// written to the writer act is given) going to log and to trail (nil:
// log only): a "requested" line first (if it cannot be written, nothing
// is done), the command's own lines as they come; a line that could not
// be written afterwards is an error (the action was taken).
func Act(log io.Writer, trail *audit.Trail, who approval.Actor, action, chargeID, reason string, act func(auditW io.Writer) error) error {
	tw := &trailWriter{w: log, trail: trail, who: who}
	if trail != nil {
		if _, err := trail.Append(audit.Entry{Operator: who.Name, Role: who.Role, Via: "cli", Action: action, ChargeID: chargeID,
			Reason: reason, Result: "requested"}); err != nil {
			return fmt.Errorf("nothing done: the audit trail cannot be written (%w)", err)
		}
	}
	err := act(tw)
	if tw.err != nil {
		err = errors.Join(err, fmt.Errorf("the action was taken, but its audit line is not in %s: %w", trail.Path(), tw.err))
	}
	return err
}

// Audited is what runs an action (action) as the person acting (Who of
// opFlag), audited (Act, its lines logged on env.Stderr): act is given
// her name and the writer of its audit lines. Where the trail is signed
// a name alone is refused, nothing done.
func (s *Session) Audited(env *cli.Env, opFlag, action string) func(act func(operator string, w io.Writer) error) error {
	return func(act func(operator string, w io.Writer) error) error {
		who, err := s.Who(env, opFlag, "")
		if err != nil {
			return err
		}
		return Act(env.Stderr, s.Trail, who, action, "", "", func(w io.Writer) error { return act(who.Name, w) })
	}
}

// NeedsProposal is the refusal of a direct action the policy wants
// proposed (why: the policy's reason), with the approvals propose command
// that proposes it (propose: its arguments); the refusal is audited.
func NeedsProposal(trail *audit.Trail, who approval.Actor, action, why, propose string) error {
	if trail != nil {
		// A refusal by someone the trail cannot vouch for is not written
		// (an unsigned line would break a signed trail); it is refused
		// all the same.
		if _, err := trail.Append(audit.Entry{Operator: who.Name, Role: who.Role, Via: "cli", Action: action, Result: "refused",
			Detail: "needs another operator's approval (" + why + "): to be proposed"}); err != nil && !errors.Is(err, audit.ErrUnsigned) {
			return fmt.Errorf("nothing done: needs another operator's approval, and the audit trail cannot be written (%w)", err)
		}
	}
	return fmt.Errorf("needs another operator's approval (%s): nothing was done; propose it with\n  chargerecovery approvals propose %s\nand have another operator approve it (chargerecovery approvals approve ID, or the console's Proposals page)", why, propose)
}
