package main

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
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// auditConfig is the one audit trail and the four-eyes policy, on every
// command that acts (and the console, with the same names).
type auditConfig struct {
	File, Policy, KeyFile, TokenFile string
	TTL                              time.Duration
	Batch                            int

	kept *approval.Settings // the settings kept in the backend (nil: none)
	me   *approval.Operator // whose --operator-key-file it is
}

func (c *auditConfig) Bind(f *cli.FlagSet) {
	f.String(&c.File, "audit-file", "IC_AUDIT_FILE", "", "the audit trail, shared with the console: every action a hash-chained JSON line, synced before it is done (where the backend keeps four-eyes settings, the trail they name: another is refused)")
	f.String(&c.Policy, "approval-required", "IC_APPROVAL_REQUIRED", "", "four-eyes: the policy kept in the backend by the console (reopen-new-attempt, redrive-force, reconcile-adopt, bulk>N, all, represent-hard-decline); a process given another is refused. The backend's policy holds whether this is given or not")
	f.Duration(&c.TTL, "approval-ttl", "IC_APPROVAL_TTL", 24*time.Hour, "how long a proposal waits for approval, and an approved one for its run (at most what the kept settings allow, 72h by default)")
	f.String(&c.KeyFile, "operator-key-file", "IC_OPERATOR_KEY_FILE", "", "your own Ed25519 key (an owner-only file of yours; chargerecovery keygen writes one, and its public key goes on your line of the console's token file): it names you and signs your audit lines, where the backend keeps four-eyes settings")
	f.String(&c.TokenFile, "operator-token-file", "IC_OPERATOR_TOKEN_FILE", "", "retired: the command line signs with your own key (--operator-key-file)")
}

// open reads the four-eyes settings kept in the backend, whatever this
// process was given, and opens the trail they name with the proposals
// beside it. Where none are kept: the trail given (none: no trail, no
// book, the policy off), unsigned; a policy flag asking for four-eyes is
// then refused (only the console's key keeps one).
func (c *auditConfig) open(ctx context.Context, env *cli.Env, bc *backend.Config) (*audit.Trail, *approval.Book, approval.Policy, error) {
	if c.TokenFile != "" {
		return nil, nil, approval.Off, cli.Usagef("--operator-token-file (IC_OPERATOR_TOKEN_FILE) is retired: the command line names you by your own key, --operator-key-file (chargerecovery keygen writes one; its public key goes on your line of the console's token file)")
	}
	var given *approval.Policy
	if strings.TrimSpace(c.Policy) != "" {
		p, err := approval.ParsePolicy(c.Policy)
		if err != nil {
			return nil, nil, approval.Off, cli.Usagef("%v", err)
		}
		given = &p
	}
	if c.Batch < 0 || c.Batch > 500 {
		return nil, nil, approval.Off, cli.Usagef("--batch must be between 1 and 500")
	}
	cur, ok, err := keptSettings(ctx, env, bc)
	if err != nil {
		return nil, nil, approval.Off, err
	}
	if !ok {
		if given != nil && given.On() {
			return nil, nil, approval.Off, cli.Usagef("--approval-required: %v: this backend keeps no four-eyes settings; four-eyes is the console's configuration (--approval-required with --console-key-file), kept in the backend, never one command's flag", approval.ErrPolicy)
		}
		if c.TTL > approval.DefaultMaxTTL {
			return nil, nil, approval.Off, cli.Usagef("--approval-ttl %s is longer than %s", c.TTL, approval.DefaultMaxTTL)
		}
		if c.File == "" {
			return nil, nil, approval.Off, nil
		}
		t, err := audit.Open(c.File)
		if err != nil {
			return nil, nil, approval.Off, fmt.Errorf("--audit-file: %w", err)
		}
		logHead(t, env.Stderr)
		book, err := approval.Open(t, approval.Options{TTL: c.TTL, Batch: c.Batch})
		if err != nil {
			t.Close()
			return nil, nil, approval.Off, err
		}
		return t, book, approval.Off, nil
	}
	c.kept = &cur
	policy, err := approval.PolicyOf(cur)
	if err != nil {
		return nil, nil, approval.Off, err
	}
	if given != nil && *given != policy {
		return nil, nil, approval.Off, cli.Usagef("--approval-required: %v: the backend keeps %s, this process was given %s; the policy is the console's configuration", approval.ErrPolicy, policy, *given)
	}
	if c.File != "" {
		abs, err := filepath.Abs(c.File)
		if err != nil || abs != cur.Trail {
			return nil, nil, approval.Off, cli.Usagef("--audit-file %s is not the trail the backend's four-eyes settings name (%s): every action goes to that one", c.File, cur.Trail)
		}
	}
	if c.TTL > cur.TTLBound() {
		return nil, nil, approval.Off, cli.Usagef("--approval-ttl %s is longer than the %s the kept settings allow", c.TTL, cur.TTLBound())
	}
	ring, err := cur.Keyring()
	if err != nil {
		return nil, nil, approval.Off, err
	}
	t, err := audit.Open(cur.Trail)
	if err != nil {
		return nil, nil, approval.Off, fmt.Errorf("the audit trail the backend's settings name: %w", err)
	}
	t.RequireSign, t.SettingsVersion = true, cur.Version
	logHead(t, env.Stderr)
	// The console's own lines remember the versions it kept: the backend
	// keeping an older one was rolled back in the database (lines an
	// operator signed do not count: she could stamp any number).
	if top, err := t.ConsoleSettings(ring); err != nil {
		t.Close()
		return nil, nil, approval.Off, fmt.Errorf("the audit trail the backend's settings name: %w", err)
	} else if top > cur.Version {
		t.Close()
		return nil, nil, approval.Off, fmt.Errorf("%w: the backend keeps four-eyes settings version %d, and the console's lines in the trail were written under version %d: the settings were rolled back in the database; nothing is done until the console's start keeps them again", approval.ErrSettings, cur.Version, top)
	}
	if c.KeyFile != "" {
		key, err := console.ReadKeyFile(c.KeyFile)
		if err != nil {
			t.Close()
			return nil, nil, approval.Off, cli.Usagef("--operator-key-file: %v", err)
		}
		pub := key.Public().(ed25519.PublicKey)
		op, ok := cur.OperatorByKey(pub)
		if !ok {
			t.Close()
			return nil, nil, approval.Off, fmt.Errorf("--operator-key-file: key %s is not one the backend's settings keep (the console keeps the keys on its token file's lines, at its start): ask for your public key (%s) to be put on your line", audit.KeyID(pub), audit.PublicKeyString(pub))
		}
		c.me = &op
		t.Sign = &audit.Signer{Name: op.Name, Key: key}
	}
	book, err := approval.Open(t, approval.Options{Policy: &policy, Keys: ring, TTL: c.TTL, Batch: c.Batch})
	if err != nil {
		t.Close()
		return nil, nil, approval.Off, err
	}
	return t, book, policy, nil
}

// keptSettings reads the four-eyes settings kept in bc's backend,
// checked against the console key this host pins (if it does).
func keptSettings(ctx context.Context, env *cli.Env, bc *backend.Config) (approval.Settings, bool, error) {
	pin, err := pinnedConsoleKey(env)
	if err != nil {
		return approval.Settings{}, false, err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return approval.Settings{}, false, err
	}
	defer b.Close()
	ks, err := approval.OpenKept(b.Store, nil)
	if err != nil {
		return approval.Settings{}, false, err
	}
	return ks.Load(ctx, pin)
}

// PinFile is where a host pins the console's public key (root's, not
// writable by operators): the settings in the backend must be signed by
// it, and must be there. Someone who can write the database cannot then
// delete the settings (four-eyes "off"), roll them back past the pin, or
// put a version 1 of her own there.
const PinFile = "/etc/chargerecovery/console.pub"

// pinnedConsoleKey is the console key this host pins: PinFile when it
// exists (nothing else counts then), else IC_CONSOLE_PUBLIC_KEY (an
// installation without /etc, and the tests: an operator who can change
// her environment can drop that one), else none.
func pinnedConsoleKey(env *cli.Env) (ed25519.PublicKey, error) {
	raw, err := os.ReadFile(PinFile)
	switch {
	case err == nil:
		if st, err := os.Stat(PinFile); err == nil && st.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("%s is writable by others (mode %04o): a pin anyone can change pins nothing; chmod 644 it, owned by root", PinFile, st.Mode().Perm())
		}
		pub, err := audit.ParsePublicKey(string(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", PinFile, err)
		}
		return pub, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: %w", PinFile, err)
	}
	if v := strings.TrimSpace(env.Getenv("IC_CONSOLE_PUBLIC_KEY")); v != "" {
		pub, err := audit.ParsePublicKey(v)
		if err != nil {
			return nil, cli.Usagef("IC_CONSOLE_PUBLIC_KEY: %v", err)
		}
		return pub, nil
	}
	return nil, nil
}

// who is the person acting. Where the backend keeps four-eyes settings a
// name given on the command line is not enough (anyone can give
// another's): the person is the one whose key --operator-key-file holds;
// with proxy sign-in the command line does not act at all (the identity
// provider names people, in the console).
func (c *auditConfig) who(env *cli.Env, opFlag string, book *approval.Book, needs string) (approval.Actor, error) {
	if c.kept == nil {
		if needs != "" {
			return approval.Actor{}, errors.New("this proposal needs another operator's approval, and this backend keeps no four-eyes settings to name her by: approve it in the console")
		}
		name, err := cli.WhoActs(env, opFlag)
		return approval.Actor{Name: name, Role: "operator", Via: "cli"}, err
	}
	if c.kept.SignIn == "proxy" {
		return approval.Actor{}, errors.New("this installation signs people in through its proxy (the identity provider names them): the command line does not act; act in the console")
	}
	if c.me == nil {
		return approval.Actor{}, cli.Usagef("this installation's audit trail is signed: the command line names you by your own key, --operator-key-file (IC_OPERATOR_KEY_FILE), or act in the console")
	}
	if c.me.Role != console.Operator.String() {
		return approval.Actor{}, fmt.Errorf("%s is a %s: only operators act", c.me.Name, c.me.Role)
	}
	if s := strings.TrimSpace(opFlag); s != "" && !strings.EqualFold(s, c.me.Name) {
		return approval.Actor{}, cli.Usagef("--operator %s is not whom the key names (%s)", s, c.me.Name)
	}
	return approval.Actor{Name: c.me.Name, Role: c.me.Role, Via: "cli"}, nil
}

// logHead has every line t appends logged on w with its seq and hash:
// the anchor, kept apart from the file, that audit verify --head checks.
func logHead(t *audit.Trail, w io.Writer) {
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
	for _, k := range []string{"charges", "entries"} {
		if l, ok := m[k].([]any); ok && k == "charges" {
			for _, v := range l {
				if s, ok := v.(string); ok {
					e.Charges = append(e.Charges, s)
				}
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

// actAudited runs act with its audit lines going to the trail too: a
// "requested" line first (if it cannot be written, nothing is done), the
// command's own lines as they come; a line that could not be written
// afterwards is an error (the action was taken).
func actAudited(env *cli.Env, trail *audit.Trail, who approval.Actor, action, chargeID, reason string, act func(auditW io.Writer) error) error {
	tw := &trailWriter{w: env.Stderr, trail: trail, who: who}
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

// needsProposal is the refusal of a direct action the policy wants
// proposed, with the command that proposes it; the refusal is audited.
func needsProposal(trail *audit.Trail, who approval.Actor, action, why, propose string) error {
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
