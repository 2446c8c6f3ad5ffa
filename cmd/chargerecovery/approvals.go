package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/console"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/audit"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
	"github.com/finedge/idempotent-consumer/service/approval"
	"github.com/finedge/idempotent-consumer/service/cli"
	"github.com/finedge/idempotent-consumer/service/operate"
	"github.com/finedge/idempotent-consumer/service/pipeline"
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
	f.String(&c.Policy, "approval-required", "IC_APPROVAL_REQUIRED", "", "four-eyes: which actions a second operator must approve, comma-separated: reopen-new-attempt, redrive-force, bulk>N (more than N charges), all; off by default. They are proposed (chargerecovery approvals propose) and run once another operator approves")
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

func runApprovals(ctx context.Context, env *cli.Env, args []string) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "propose":
		return runPropose(ctx, env, args[1:])
	case "list", "show", "approve", "reject", "run":
		return runDecide(ctx, env, sub, args[1:])
	case "policy":
		return runPolicy(env, args[1:])
	case "-h", "--help":
		fmt.Fprintln(env.Stderr, `usage: chargerecovery approvals propose redrive|reopen|renotify [flags] --reason TEXT
       chargerecovery approvals list [--all] | show ID | approve ID | reject ID --reason TEXT | run ID
       chargerecovery approvals policy [POLICY --reason TEXT]

  propose  freeze what a bulk action (or one that needs four-eyes) will touch: count, sample, totals
  list     proposals waiting, approved or running (--all: every one)
  show     one proposal: its targets, and what became of each
  approve  approve another operator's proposal, and run it (--no-run: approve only)
  reject   reject a proposal (the proposer may withdraw her own)
  run      run an approved proposal, or resume one that stopped
  policy   the four-eyes policy kept beside the audit trail; policy POLICY --reason TEXT changes it (audited)

chargerecovery approvals SUB -h gives the flags.`)
		return cli.ErrHelp
	}
	return cli.Usagef("say approvals propose, list, show ID, approve ID, reject ID or run ID (see chargerecovery approvals -h)")
}

func runPropose(ctx context.Context, env *cli.Env, args []string) error {
	kind := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		kind, args = args[0], args[1:]
	}
	f, bc, asJSON := opsFlags(env, "approvals propose "+kind, "approvals propose redrive|reopen|renotify [flags] --reason TEXT")
	var ac auditConfig
	ac.Bind(f)
	var spec approval.Spec
	var codes, ids string
	var retention time.Duration
	f.String(&spec.Reason, "reason", "", "", "why (required): kept in the audit trail and every record touched")
	f.String(&codes, "reason-code", "", "", "redrive, reopen: only DLQ entries with these reason codes, comma-separated (reopen: default debit_failed)")
	f.String(&ids, "charge-id", "", "", "only these charges, comma-separated (renotify: default every DEBITED_NOTIFICATION_FAILED record)")
	f.Duration(&spec.OlderThan, "older-than", "", 0, "redrive, reopen: only entries dead-lettered longer ago than this")
	f.Bool(&spec.Force, "force", "", false, "redrive: conflicts and entries past the retention too")
	f.Bool(&spec.NewAttempt, "new-attempt", "", false, "reopen: under the next bank-key generation (explicit declines only)")
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	spec.Kind = approval.Kind(kind)
	spec.Codes, spec.ChargeIDs = cli.SplitList(codes), cli.SplitList(ids)
	if err := spec.Check(); err != nil {
		return cli.Usagef("%v", err)
	}
	if ac.File == "" {
		return cli.Usagef("proposals are kept beside the audit trail: give --audit-file (IC_AUDIT_FILE)")
	}
	trail, book, _, err := ac.open(env)
	if err != nil {
		return err
	}
	defer trail.Close()
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil {
		return err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	be := approval.Backend{Queue: b.Queue, Store: b.Store, Retention: retention}
	targets, err := be.Select(ctx, spec, time.Now())
	if err != nil {
		return err
	}
	p, err := book.Propose(who, spec, targets)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(p)
	}
	printProposal(env.Stdout, p, 10)
	return nil
}

// printProposal shows p: what it does, what it touches, where it is.
func printProposal(w io.Writer, p approval.Proposal, sample int) {
	fmt.Fprintf(w, "proposal %s: %s\n", p.ID, p.Spec.Describe())
	fmt.Fprintf(w, "  why:      %s\n", p.Spec.Reason)
	fmt.Fprintf(w, "  proposed: %s by %s (%s); expires %s\n", p.At.Format(time.RFC3339), p.Proposer.Name, p.Proposer.Via, p.Expires.Format(time.RFC3339))
	fmt.Fprintf(w, "  touches:  %d charge(s), %s\n", len(p.Targets), approval.FormatTotals(p.Totals))
	for _, t := range p.Sample(sample) {
		amt := ""
		if t.Currency != "" {
			amt = charge.Money{Minor: t.Minor, Currency: charge.Currency(t.Currency)}.String()
		}
		fmt.Fprintf(w, "    %-28s %-14s %-16s %s\n", t.Name(), t.Account, amt, t.Code)
	}
	if len(p.Targets) > sample {
		fmt.Fprintf(w, "    … and %d more (chargerecovery approvals show %s --json lists all)\n", len(p.Targets)-sample, p.ID)
	}
	done, all := p.Progress()
	fmt.Fprintf(w, "  state:    %s", p.State)
	if p.Decider != nil {
		fmt.Fprintf(w, " (by %s, %s)", p.Decider.Name, p.Decider.Via)
	}
	if done > 0 {
		fmt.Fprintf(w, "; %d of %d done: %s", done, all, approval.FormatCounts(p.Counts()))
	}
	fmt.Fprintln(w)
	switch p.State {
	case approval.Pending:
		fmt.Fprintf(w, "  needs:    another operator's approval (%s):\n    chargerecovery approvals approve %s\n", p.Needs, p.ID)
	case approval.Approved:
		fmt.Fprintf(w, "  next:     chargerecovery approvals run %s\n", p.ID)
	case approval.Running:
		fmt.Fprintf(w, "  next:     if its run stopped, chargerecovery approvals run %s resumes it\n", p.ID)
	}
}

func runDecide(ctx context.Context, env *cli.Env, sub string, args []string) error {
	f, bc, asJSON := opsFlags(env, "approvals "+sub, "approvals "+sub+" [flags] ID")
	var ac auditConfig
	ac.Bind(f)
	var all, noRun bool
	var why string
	var retention, timeout time.Duration
	var nc pipeline.NotifyConfig
	switch sub {
	case "list":
		f.Bool(&all, "all", "", false, "every proposal, also those done, rejected or expired")
	case "reject":
		f.String(&why, "reason", "", "", "why it is rejected (required)")
	case "approve":
		f.Bool(&noRun, "no-run", "", false, "approve only; run it later with approvals run ID")
	}
	if sub == "approve" || sub == "run" {
		f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
		f.Int(&ac.Batch, "batch", "", 50, "act on this many targets between two saves of the progress (at most 500)")
		f.Duration(&timeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "renotify: how long one notification may take")
		nc.Bind(f)
	}
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if ac.File == "" {
		return cli.Usagef("proposals are kept beside the audit trail: give --audit-file (IC_AUDIT_FILE)")
	}
	id := ""
	if sub != "list" {
		if len(f.Args()) != 1 {
			return cli.Usagef("give exactly one proposal ID (see chargerecovery approvals list)")
		}
		id = f.Args()[0]
	}
	if sub == "reject" && strings.TrimSpace(why) == "" {
		return cli.Usagef("--reason is required: say why it is rejected")
	}
	trail, book, _, err := ac.open(env)
	if err != nil {
		return err
	}
	defer trail.Close()
	switch sub {
	case "list":
		ps, err := book.List()
		if err != nil {
			return err
		}
		var out []approval.Proposal
		for _, p := range ps {
			if all || p.State == approval.Pending || p.State == approval.Approved || p.State == approval.Running {
				out = append(out, p)
			}
		}
		if *asJSON {
			return json.NewEncoder(env.Stdout).Encode(map[string]any{"proposals": out})
		}
		if len(out) == 0 {
			fmt.Fprintln(env.Stdout, "no proposal waiting, approved or running (--all shows every one)")
		}
		for _, p := range out {
			done, n := p.Progress()
			fmt.Fprintf(env.Stdout, "%s  %-8s  %-7s by %-10s %4d charge(s) %-22s %d/%d done  %s\n", p.ID, p.State, p.Spec.Kind, p.Proposer.Name,
				len(p.Targets), approval.FormatTotals(p.Totals), done, n, p.Spec.Reason)
		}
		return nil
	case "show":
		p, err := book.Get(id)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(env.Stdout).Encode(p)
		}
		printProposal(env.Stdout, p, 20)
		printOutcomes(env.Stdout, p)
		return nil
	}
	// A proposal that needs a second operator names the one deciding by
	// her token, whatever this process's flags say.
	cur, err := book.Get(id)
	if err != nil {
		return err
	}
	who, err := ac.who(env, *opFlag, book, cur.Needs)
	if err != nil {
		return err
	}
	var p approval.Proposal
	switch sub {
	case "reject":
		if p, err = book.Reject(id, who, why); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "rejected %s: nothing of it will run\n", p.ID)
		return nil
	case "approve":
		if p, err = book.Approve(id, who); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "approved %s (%s, %d charge(s), %s)\n", p.ID, p.Spec.Describe(), len(p.Targets), approval.FormatTotals(p.Totals))
		if noRun {
			fmt.Fprintf(env.Stdout, "next: chargerecovery approvals run %s\n", p.ID)
			return nil
		}
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	be := approval.Backend{Queue: b.Queue, Store: b.Store, Retention: retention}
	if cur.Spec.Kind == approval.Renotify {
		if nc.Channel == "" {
			return cli.Usagef("a renotify proposal needs the notification channel (--notify and its flags, as renotify's)")
		}
		var p cli.Problems
		nc.Check(&p)
		if err := p.Err(); err != nil {
			return err
		}
		var lc cli.LogConfig
		s, err := keptNoticeSender(ctx, nc, timeout, lc.Logger(env.Stderr))
		if err != nil {
			return err
		}
		if be.Renotifier, err = operate.NewRenotifier(b.Store, s, operate.RenotifierOptions{Lease: time.Minute, Retention: retention, Timeout: timeout, Channel: nc.Channel}); err != nil {
			return err
		}
	}
	p, err = book.Run(ctx, id, who, be, func(p approval.Proposal) {
		done, all := p.Progress()
		fmt.Fprintf(env.Stderr, "%s batch %d: %d of %d done (%s)\n", p.ID, p.Batches, done, all, approval.FormatCounts(p.Counts()))
	})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(p); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "%s done: %d charge(s): %s\n", p.ID, len(p.Targets), approval.FormatCounts(p.Counts()))
		printOutcomes(env.Stdout, p)
	}
	if n := p.Counts()["failed"]; n > 0 {
		return fmt.Errorf("%d target(s) failed (listed above); look at each, then propose them again", n)
	}
	return nil
}

// printOutcomes lists the targets not done, by id, with why.
func printOutcomes(w io.Writer, p approval.Proposal) {
	for _, t := range p.Targets {
		o, ok := p.Outcomes[t.Key()]
		if !ok || o.Result == "moved" || o.Result == "reopened" || o.Result == "sent" {
			continue
		}
		fmt.Fprintf(w, "  %-9s %s: %s\n", o.Result, t.Name(), o.Why)
	}
}

// runAudit is chargerecovery audit verify|list.
func runAudit(ctx context.Context, env *cli.Env, args []string) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "verify", "list", "rotate":
	case "-h", "--help":
		fmt.Fprintln(env.Stderr, "usage: chargerecovery audit verify [--head SEQ:SHA256,…] [--audit-file FILE | FILE…] | audit list [flags] | audit rotate --to FILE\n\n  verify  check the hash chain of the trail (files given oldest first are checked as one chain), and that it holds the heads logged when lines were written (--head); exit 1 naming the first line that breaks it\n  list    the last entries, newest first, filtered (--operator, --action, --charge-id, --proposal, --via)\n  rotate  move the trail to FILE and go on in a new file at its path, chained to it (monthly, for retention)\n\nchargerecovery audit verify -h, audit list -h and audit rotate -h give the flags.")
		return cli.ErrHelp
	default:
		return cli.Usagef("say audit verify or audit list (see chargerecovery audit -h)")
	}
	f := cli.NewFlagSet(env, "audit "+sub, "audit "+sub+" [flags]")
	var ac auditConfig
	f.String(&ac.File, "audit-file", "IC_AUDIT_FILE", "", "the audit trail")
	var asJSON bool
	f.Bool(&asJSON, "json", "", false, "print JSON")
	var flt audit.Filter
	limit := 50
	var heads, to string
	switch sub {
	case "verify":
		f.String(&heads, "head", "", "", "heads logged when lines were written (the \"audit head\" log lines), SEQ:SHA256 comma-separated: the trail must hold each")
	case "rotate":
		f.String(&to, "to", "", "", "where the current trail goes (a new name, e.g. audit-2026-11.jsonl)")
		f.String(&flt.Operator, "operator", "IC_OPERATOR", "", "who rotates (named in the new file's first line)")
	}
	if sub == "list" {
		f.String(&flt.Operator, "operator", "", "", "only this person's")
		f.String(&flt.Action, "action", "", "", "only actions starting so (redrive, reopen, approve, batch…)")
		f.String(&flt.ChargeID, "charge-id", "", "", "only lines naming this charge")
		f.String(&flt.Proposal, "proposal", "", "", "only this proposal's")
		f.String(&flt.Via, "via", "", "", "console or cli")
		f.Int(&limit, "limit", "", 50, "at most this many")
	}
	if err := f.Parse(args[1:], sub == "verify"); err != nil {
		return err
	}
	files := f.Args()
	if len(files) == 0 && ac.File != "" {
		files = []string{ac.File}
	}
	if len(files) == 0 {
		return cli.Usagef("give the trail: --audit-file FILE (IC_AUDIT_FILE)")
	}
	if sub == "rotate" {
		if to == "" {
			return cli.Usagef("give --to FILE: where the current trail goes")
		}
		t, err := audit.Open(files[0])
		if err != nil {
			return err
		}
		defer t.Close()
		logHead(t, env.Stderr)
		who, err := cli.WhoActs(env, flt.Operator)
		if err != nil {
			return err
		}
		e, err := t.Rotate(to, audit.Entry{Operator: who, Via: "cli"})
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "rotated: the trail up to seq %d is in %s; %s goes on at seq %d (check both with chargerecovery audit verify %s %s)\n", e.Seq-1, to, files[0], e.Seq, to, files[0])
		return nil
	}
	if sub == "list" {
		if limit < 1 {
			return cli.Usagef("--limit must be at least 1")
		}
		t, err := audit.Open(files[0])
		if err != nil {
			return err
		}
		defer t.Close()
		es, err := t.Recent(limit, flt)
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(env.Stdout).Encode(map[string]any{"entries": es})
		}
		for _, e := range es {
			what := e.ChargeID
			if len(e.Charges) > 0 {
				what = fmt.Sprintf("%d charge(s)", len(e.Charges))
			}
			// Every field as printable text: a line's content never makes
			// a row of its own, nor a terminal escape.
			p := charge.Printable
			fmt.Fprintf(env.Stdout, "%6d %s %-10s %-7s %-20s %-14s %-18s %-12s %s %s\n", e.Seq, e.At.Format(time.RFC3339), p(e.Operator), p(e.Via),
				p(e.Action), p(e.Proposal), p(what), p(e.Result), p(e.Reason), p(e.Detail))
		}
		return nil
	}
	var anchors []audit.Anchor
	for _, h := range cli.SplitList(heads) {
		seq, hash, ok := strings.Cut(h, ":")
		n, err := strconv.ParseInt(seq, 10, 64)
		if !ok || err != nil || n < 1 || len(hash) != 64 {
			return cli.Usagef("--head %q: want SEQ:SHA256 (a seq and the 64 hex digits logged with it)", h)
		}
		anchors = append(anchors, audit.Anchor{Seq: n, Hash: strings.ToLower(hash)})
	}
	// Each file's range of seq first (unanchored), then each again with
	// the heads that fall in it (and those past the end, with the last).
	verifyAll := func(with func(i int, first, last int64) []audit.Anchor, ranges [][2]int64) (audit.Report, []audit.Report, error) {
		var rep audit.Report
		var reps []audit.Report
		for i, path := range files {
			fh, err := os.Open(path)
			if err != nil {
				return rep, nil, cli.Usagef("%v", err)
			}
			var use []audit.Anchor
			if with != nil {
				use = with(i, ranges[i][0], ranges[i][1])
			}
			r, err := audit.Verify(fh, path, rep, use...)
			fh.Close()
			if err != nil {
				return rep, nil, fmt.Errorf("the audit trail is broken: %w", err)
			}
			reps = append(reps, r)
			rep = r
		}
		return rep, reps, nil
	}
	_, reps, err := verifyAll(nil, nil)
	if err != nil {
		return err
	}
	var ranges [][2]int64
	prevHead := int64(0)
	for _, r := range reps {
		ranges = append(ranges, [2]int64{prevHead + 1, r.HeadSeq})
		prevHead = r.HeadSeq
	}
	_, _, err = verifyAll(func(i int, first, last int64) []audit.Anchor {
		var use []audit.Anchor
		for _, a := range anchors {
			if (a.Seq >= first && a.Seq <= last) || (i == len(files)-1 && a.Seq > last) {
				use = append(use, a)
			}
		}
		return use
	}, ranges)
	if err != nil {
		return err
	}
	var rep audit.Report
	for i, path := range files {
		r := reps[i]
		torn := ""
		if len(r.Torn) > 0 {
			torn = fmt.Sprintf("; %d fragment(s) of writes cut short skipped (lines %v), the chain whole around them", len(r.Torn), r.Torn)
		}
		legacy := ""
		if r.Legacy > 0 {
			legacy = fmt.Sprintf("; %d line(s) from before the chain, not protected", r.Legacy)
		}
		fmt.Fprintf(env.Stdout, "%s: %d line(s), chain whole%s%s\n", path, r.Lines, legacy, torn)
		rep = r
	}
	if len(anchors) > 0 {
		fmt.Fprintf(env.Stdout, "holds the %d logged head(s) given\n", len(anchors))
	}
	fmt.Fprintf(env.Stdout, "head: seq %d sha256 %s (give the last \"audit head\" the processes logged as --head SEQ:SHA256: a line cut from the end, or a trail edited and chained again, shows there)\n", rep.HeadSeq, rep.HeadHash)
	return nil
}

// runPolicy shows the kept four-eyes policy, or changes it: by an
// operator named by her token where the kept policy asks for approvals.
func runPolicy(env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "approvals policy", "approvals policy [POLICY --reason TEXT]")
	var ac auditConfig
	ac.Bind(f)
	var why string
	f.String(&why, "reason", "", "", "why the policy changes (required to change it)")
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if ac.File == "" {
		return cli.Usagef("the policy is kept beside the audit trail: give --audit-file (IC_AUDIT_FILE)")
	}
	if ac.Policy != "" {
		return cli.Usagef("give the new policy as the argument (approvals policy POLICY --reason TEXT), not --approval-required")
	}
	trail, book, kept, err := ac.open(env)
	if err != nil {
		return err
	}
	defer trail.Close()
	if len(f.Args()) == 0 {
		fmt.Fprintf(env.Stdout, "four-eyes policy: %s\n", kept)
		return nil
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give one POLICY (e.g. reopen-new-attempt,redrive-force,bulk>100, or off)")
	}
	p, err := approval.ParsePolicy(f.Args()[0])
	if err != nil {
		return cli.Usagef("%v", err)
	}
	if strings.TrimSpace(why) == "" {
		return cli.Usagef("--reason is required: say why the policy changes")
	}
	if kept.On() {
		return approval.ErrPolicyOn
	}
	who, err := ac.whoWith(env, *opFlag, book, "", true)
	if err != nil {
		return err
	}
	if p.On() && cmp.Or(book.TokenFile(), ac.ConsoleTokens) == "" {
		return cli.Usagef("give --console-token-file (the console's): under a policy the command line names operators by the console's tokens")
	}
	if err := book.SetPolicy(who, p, ac.ConsoleTokens, why); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "four-eyes policy: %s (was %s)\n", p, kept)
	return nil
}
