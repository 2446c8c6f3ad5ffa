package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/proposals"
	"github.com/finedge/idempotent-consumer/app/service/recon"
	"github.com/finedge/idempotent-consumer/idempotency"
)

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
		return runPolicy(ctx, env, args[1:])
	case "-h", "--help":
		fmt.Fprintln(env.Stderr, proposals.Usage)
		return cli.ErrHelp
	}
	return cli.Usagef("say approvals propose, list, show ID, approve ID, reject ID or run ID (see chargerecovery approvals -h)")
}

func runPropose(ctx context.Context, env *cli.Env, args []string) error {
	kind := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		kind, args = args[0], args[1:]
	}
	f, bc, asJSON := opsFlags(env, "approvals propose "+kind, "approvals propose redrive|reopen|renotify|reconcile [flags] --reason TEXT")
	var ac auditConfig
	ac.Bind(f)
	var spec approval.Spec
	var be approval.Backend
	var codes, declineCodes, ids string
	var src recon.Source
	if kind == string(approval.Reconcile) {
		src.Bind(f)
		recon.BindProposal(f, &spec, &be)
	}
	f.String(&spec.Reason, "reason", "", "", "why (required): kept in the audit trail and every record touched")
	f.String(&codes, "reason-code", "", "", "redrive, reopen: only DLQ entries with these reason codes, comma-separated (reopen: default debit_failed)")
	f.String(&declineCodes, "decline-code", "", "", "redrive, reopen: only charges the bank declined with these codes, comma-separated (e.g. INSUFFICIENT_FUNDS; case, spaces and hyphens as the bank spells them)")
	f.String(&ids, "charge-id", "", "", "only these charges, comma-separated (renotify: default every DEBITED_NOTIFICATION_FAILED record)")
	f.Duration(&spec.OlderThan, "older-than", "", 0, "redrive, reopen: only entries dead-lettered longer ago than this")
	f.Bool(&spec.Force, "force", "", false, "redrive: conflicts and entries past the retention too")
	f.Bool(&spec.NewAttempt, "new-attempt", "", false, "reopen: under the next bank-key generation (explicit declines only)")
	f.Duration(&be.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	spec.Kind = approval.Kind(kind)
	spec.Codes, spec.ChargeIDs, spec.DeclineCodes = cli.SplitList(codes), cli.SplitList(ids), cli.SplitList(declineCodes)
	if spec.Kind == approval.Reconcile {
		if err := recon.CheckKind(spec.BreakKind); err != nil {
			return err
		}
		st, err := src.Open(time.Now())
		if err != nil {
			return err
		}
		be.Fingerprints = st.Fingerprints
		st.Fill(&spec)
	}
	if err := spec.Check(); err != nil {
		return cli.Usagef("%v", err)
	}
	book, err := ac.openBook(ctx, env, bc)
	if err != nil {
		return err
	}
	defer ac.s.Close()
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil {
		return err
	}
	p, err := proposals.Propose(ctx, book, who, spec, be, func() (*backend.Backend, error) { return backend.OpenExisting(ctx, bc) })
	if err != nil {
		return err
	}
	return printed(env, *asJSON, p, func(w io.Writer) { approval.Print(w, p, 10) })
}

func runDecide(ctx context.Context, env *cli.Env, sub string, args []string) error {
	f, bc, asJSON := opsFlags(env, "approvals "+sub, "approvals "+sub+" [flags] ID")
	var ac auditConfig
	ac.Bind(f)
	var all bool
	var rf proposals.RunFlags
	d := proposals.Decision{Sub: sub, Out: env.Stdout}
	switch sub {
	case "list":
		f.Bool(&all, "all", "", false, "every proposal, also those done, rejected or expired")
	case "reject":
		f.String(&d.Reason, "reason", "", "", "why it is rejected (required)")
	case "approve":
		f.Bool(&d.NoRun, "no-run", "", false, "approve only; run it later with approvals run ID")
	}
	if sub == "approve" || sub == "run" {
		f.Int(&ac.Batch, "batch", "", 50, "act on this many targets between two saves of the progress (at most 500)")
		rf.Bind(f)
	}
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if ac.File == "" {
		return cli.Usagef("proposals are kept beside the audit trail: give --audit-file (IC_AUDIT_FILE)")
	}
	if sub != "list" {
		if len(f.Args()) != 1 {
			return cli.Usagef("give exactly one proposal ID (see chargerecovery approvals list)")
		}
		d.ID = f.Args()[0]
	}
	if sub == "reject" && strings.TrimSpace(d.Reason) == "" {
		return cli.Usagef("--reason is required: say why it is rejected")
	}
	trail, book, _, err := ac.open(ctx, env, bc)
	if err != nil {
		return err
	}
	defer trail.Close()
	switch sub {
	case "list":
		out, err := proposals.Listed(book, all)
		if err != nil {
			return err
		}
		return printed(env, *asJSON, map[string]any{"proposals": out}, func(w io.Writer) { proposals.PrintListed(w, out) })
	case "show":
		p, err := book.Get(d.ID)
		if err != nil {
			return err
		}
		return printed(env, *asJSON, p, func(w io.Writer) { approval.Print(w, p, 20); approval.PrintOutcomes(w, p) })
	}
	d.Who = func(needs string) (approval.Actor, error) { return ac.who(env, *opFlag, book, needs) }
	var lc cli.LogConfig
	o := rf.Settle(ctx, func() (*backend.Backend, error) { return backend.OpenExisting(ctx, bc) }, lc.Logger(env.Stderr),
		func(p approval.Proposal) { proposals.PrintProgress(env.Stderr, p) })
	p, ran, err := proposals.Decide(ctx, book, d, o)
	if err != nil || !ran {
		return err
	}
	if err := printed(env, *asJSON, p, func(w io.Writer) { proposals.PrintRun(w, p) }); err != nil {
		return err
	}
	return proposals.Failed(p)
}

// runPolicy shows the four-eyes settings kept in the backend, or
// changes them where no console runs — with the console's key: they are
// signed by it, and nobody else changes them.
func runPolicy(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "approvals policy", "approvals policy [POLICY --reason TEXT --console-key-file FILE --audit-file FILE --console-auth token|proxy [--console-token-file FILE]]")
	var cc console.Config
	var why string
	cc.BindPolicy(f, &why)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) == 0 {
		cur, ok, err := keptSettings(ctx, env, bc)
		if err != nil {
			return err
		}
		return printed(env, *asJSON, map[string]any{"kept": ok, "settings": cur}, func(w io.Writer) { proposals.PrintSettings(w, cur, ok) })
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give one POLICY (e.g. reopen-new-attempt,redrive-force,bulk>100, or off)")
	}
	var lc cli.LogConfig
	p, err := cc.ChangePolicy(ctx, f.Args()[0], why, func() (*backend.Backend, error) { return backend.OpenExisting(ctx, bc) }, env.Stderr, lc.Logger(env.Stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "four-eyes policy: %s\n", p)
	return nil
}

// printed writes v as JSON on stdout with --json, else has text show it.
func printed(env *cli.Env, asJSON bool, v any, text func(io.Writer)) error {
	if asJSON {
		return json.NewEncoder(env.Stdout).Encode(v)
	}
	text(env.Stdout)
	return nil
}
