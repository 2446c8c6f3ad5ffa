package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/console"
	"github.com/finedge/idempotent-consumer/internal/audit"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
	"github.com/finedge/idempotent-consumer/service/approval"
	"github.com/finedge/idempotent-consumer/service/cli"
)

// auditConfig is the one audit trail and the four-eyes policy, on every
// command that acts (and the console, with the same names).
type auditConfig struct {
	File, Policy, TokenFile, ConsoleTokens string
	TTL                                    time.Duration
	Batch                                  int
}

func (c *auditConfig) Bind(f *cli.FlagSet) {
	f.String(&c.File, "audit-file", "IC_AUDIT_FILE", "", "the audit trail, shared with the console: every action a hash-chained JSON line, synced before it is done (required under --approval-required; chargerecovery audit verify checks it)")
	f.String(&c.Policy, "approval-required", "IC_APPROVAL_REQUIRED", "", "four-eyes: which actions a second operator must approve, comma-separated: reopen-new-attempt, redrive-force, reconcile-adopt (a reconciliation resolve adopting a posting), bulk>N (more than N charges), all; and represent-hard-decline (not in all: lets a new attempt on a hard decline be proposed, shown with its code, and done once another operator approves; without it one is always refused); off by default. They are proposed (chargerecovery approvals propose) and run once another operator approves")
	f.Duration(&c.TTL, "approval-ttl", "IC_APPROVAL_TTL", 24*time.Hour, "how long a proposal waits for approval, and an approved one for its run")
	f.String(&c.TokenFile, "operator-token-file", "IC_OPERATOR_TOKEN_FILE", "", "under --approval-required: an owner-only file holding your console token, which names you (--operator is a name anyone can give)")
	f.String(&c.ConsoleTokens, "console-token-file", "IC_CONSOLE_TOKEN_FILE", "", "the console's token file, which --operator-token-file is checked against")
}

// open opens the trail and, beside it, the proposals with the kept
// four-eyes policy (a policy flag given where another is kept is
// refused). Without --audit-file: no trail, no book, the policy off (and
// a policy flag is a usage error: proposals are kept beside the trail).
func (c *auditConfig) open(env *cli.Env) (*audit.Trail, *approval.Book, approval.Policy, error) {
	var given *approval.Policy
	if strings.TrimSpace(c.Policy) != "" {
		p, err := approval.ParsePolicy(c.Policy)
		if err != nil {
			return nil, nil, approval.Off, cli.Usagef("%v", err)
		}
		given = &p
	}
	if c.File == "" {
		if given != nil && given.On() {
			return nil, nil, approval.Off, cli.Usagef("--approval-required needs --audit-file (IC_AUDIT_FILE): proposals and approvals are kept beside the audit trail")
		}
		return nil, nil, approval.Off, nil
	}
	if c.Batch < 0 || c.Batch > 500 {
		return nil, nil, approval.Off, cli.Usagef("--batch must be between 1 and 500")
	}
	if c.ConsoleTokens != "" {
		abs, err := filepath.Abs(c.ConsoleTokens)
		if err != nil {
			return nil, nil, approval.Off, cli.Usagef("--console-token-file: %v", err)
		}
		c.ConsoleTokens = abs
	}
	t, err := audit.Open(c.File)
	if err != nil {
		return nil, nil, approval.Off, fmt.Errorf("--audit-file: %w", err)
	}
	logHead(t, env.Stderr)
	book, err := approval.Open(t, approval.Options{Policy: given, TokenFile: c.ConsoleTokens, TTL: c.TTL, Batch: c.Batch})
	if errors.Is(err, approval.ErrPolicy) {
		t.Close()
		return nil, nil, approval.Off, cli.Usagef("--approval-required: %v", err)
	}
	if err != nil {
		t.Close()
		return nil, nil, approval.Off, err
	}
	return t, book, book.Policy(), nil
}

// who is the person acting. Under a four-eyes policy a name given on the
// command line is not enough (anyone can give another's): the person is
// the one whose console token her --operator-token-file holds.
func (c *auditConfig) who(env *cli.Env, opFlag string, book *approval.Book, needs string) (approval.Actor, error) {
	return c.whoWith(env, opFlag, book, needs, false)
}

// whoWith is who; bootstrap (setting the policy while it is off) may name
// the console's token file that it is about to keep.
func (c *auditConfig) whoWith(env *cli.Env, opFlag string, book *approval.Book, needs string, bootstrap bool) (approval.Actor, error) {
	policy, tokens := approval.Off, ""
	if book != nil {
		policy, tokens = book.Policy(), book.TokenFile()
	}
	if !policy.On() && c.TokenFile == "" && needs == "" {
		name, err := cli.WhoActs(env, opFlag)
		return approval.Actor{Name: name, Role: "operator", Via: "cli"}, err
	}
	if c.TokenFile == "" {
		return approval.Actor{}, cli.Usagef("under --approval-required the command line names you by your console token: give --operator-token-file (an owner-only file holding it), or act in the console")
	}
	if tokens == "" && bootstrap {
		tokens = c.ConsoleTokens
	}
	if tokens == "" {
		return approval.Actor{}, fmt.Errorf("no console token file is kept beside the audit trail, so the command line cannot tell who you are: start the console with token sign-in once (it keeps its own), or, while the policy is off, chargerecovery approvals policy POLICY --console-token-file FILE --reason TEXT; or act in the console")
	}
	tok, err := secretfile.Read(c.TokenFile)
	if err != nil {
		return approval.Actor{}, cli.Usagef("--operator-token-file: %v", err)
	}
	name, role, err := console.TokenIdentity(tokens, string(tok))
	if err != nil {
		return approval.Actor{}, cli.Usagef("--operator-token-file: %v", err)
	}
	if role != console.Operator {
		return approval.Actor{}, fmt.Errorf("%s is a viewer: only operators act", name)
	}
	if s := strings.TrimSpace(opFlag); s != "" && !strings.EqualFold(s, name) {
		return approval.Actor{}, cli.Usagef("--operator %s is not whom the token names (%s)", s, name)
	}
	return approval.Actor{Name: name, Role: role.String(), Via: "cli"}, nil
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
		if _, err := trail.Append(audit.Entry{Operator: who.Name, Role: who.Role, Via: "cli", Action: action, Result: "refused",
			Detail: "needs another operator's approval (" + why + "): to be proposed"}); err != nil {
			return fmt.Errorf("nothing done: needs another operator's approval, and the audit trail cannot be written (%w)", err)
		}
	}
	return fmt.Errorf("needs another operator's approval (%s): nothing was done; propose it with\n  chargerecovery approvals propose %s\nand have another operator approve it (chargerecovery approvals approve ID, or the console's Proposals page)", why, propose)
}
