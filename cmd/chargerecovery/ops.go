package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// opsFlags are the flags every operator command shares.
func opsFlags(env *cli.Env, name, synopsis string) (*cli.FlagSet, *backend.Config, *bool) {
	f := cli.NewFlagSet(env, name, synopsis)
	bc := &backend.Config{}
	bc.Bind(f)
	asJSON := new(bool)
	f.Bool(asJSON, "json", "", false, "print JSON")
	return f, bc, asJSON
}

func openForOps(ctx context.Context, bc *backend.Config) (*backend.Backend, error) {
	return backend.OpenExisting(ctx, bc)
}

func runInspect(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "inspect", "inspect [flags] CHARGE_ID")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery %s -h)", f.Name())
	}
	id := f.Args()[0]
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	now := time.Now()
	rec, err := b.Store.Get(ctx, id, now)
	if errors.Is(err, idempotency.ErrNotFound) {
		return fmt.Errorf("no idempotency record for %s: never claimed, released after a transient failure, or past its retention", id)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(status.RecordJSONOf(rec, now))
	}
	status.PrintRecord(env.Stdout, rec, now)
	return nil
}

// runReopen turns a FAILED record back into one the next delivery claims
// afresh, for an operator who fixed the cause (a charge failed by a bank
// answer that was wrongly taken as final, say). The flow: fix the cause →
// reopen → redrive --reason debit_failed.
func runReopen(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "reopen", "reopen [flags] CHARGE_ID --reason TEXT [--new-attempt]")
	o := operate.ReopenOptions{Out: env.Stdout, Audit: env.Stderr}
	f.Bool(&o.NewAttempt, "new-attempt", "", false, "for a charge FAILED by an explicit decline (e.g. INSUFFICIENT_FUNDS, now that funds arrived): debit it under the next bank-key generation (CHARGE_ID~2, ~3, …), since the bank's answer under the old key is final; refused for any other failure")
	f.Bool(&o.SameKey, "same-key", "", false, "reopen an explicit decline under its old bank key (refused without it: the bank declines it again); only for a \"decline\" that was not the bank's final word, such as a --corebank-declines entry that took a 401 for one")
	f.String(&o.Reason, "reason", "", "", "why the charge is reopened (kept in the record and the audit log; required), e.g. \"INC-4711: gateway token fixed\"")
	f.Duration(&o.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long the reopened record is kept")
	var ac auditConfig
	ac.Bind(f)
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	trail, book, policy, err := ac.open(ctx, env, bc)
	if err != nil {
		return err
	}
	defer trail.Close()
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery %s -h)", f.Name())
	}
	if strings.TrimSpace(o.Reason) == "" {
		return cli.Usagef("--reason is required: say why the charge may be debited now (it stays in the record)")
	}
	if o.Retention < 24*time.Hour {
		return cli.Usagef("--retention %s is under 24h", o.Retention)
	}
	o.ID, o.JSON = f.Args()[0], *asJSON
	if why := policy.Needs(approval.Spec{Kind: approval.Reopen, NewAttempt: o.NewAttempt}, 1); why != "" {
		// Said first, whoever asks: nothing is done without a proposal.
		return needsProposal(trail, claimed(env, *opFlag, &ac, book), "reopen --new-attempt", why, fmt.Sprintf("reopen --new-attempt --charge-id %s --reason %q", o.ID, o.Reason))
	}
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil {
		return err
	}
	o.Operator = who.Name
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	action := "reopen"
	if o.NewAttempt {
		action = "reopen --new-attempt"
		// A hard decline is never presented again directly: where the
		// policy lets it be at all (represent-hard-decline), only by a
		// proposal another operator approves with its code shown.
		if rec, err := b.Store.Get(ctx, o.ID, time.Now()); err == nil && rec.State == driver.StateFailed {
			code := charge.DeclineCode(rec.Detail)
			if why, hard := charge.HardDecline(code); hard && policy.RepresentHardDecline {
				return needsProposal(trail, who, action, fmt.Sprintf("a new attempt on a hard decline, %s (%s)", charge.Printable(code), why),
					fmt.Sprintf("reopen --new-attempt --charge-id %s --reason %q", o.ID, o.Reason))
			}
		}
	}
	return actAudited(env, trail, who, action, o.ID, o.Reason, func(w io.Writer) error {
		o.Audit = w
		return operate.ReopenCharge(ctx, b.Store, o)
	})
}

func runStuck(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "stuck", "stuck [flags]")
	var limit int
	f.Int(&limit, "limit", "", 20, "list at most this many")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	if limit < 1 {
		return cli.Usagef("--limit must be at least 1")
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	sl, ok := b.Store.(driver.StuckLister)
	if !ok {
		return fmt.Errorf("the %s store cannot list stuck claims (it would need a scan of every key); each is reclaimed by its next delivery, and inspect CHARGE_ID shows one", cmp.Or(bc.Store, bc.Kind))
	}
	now := time.Now()
	recs, total, err := sl.Stuck(ctx, now, limit)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(status.StuckJSONOf(recs, total, now))
	}
	return status.PrintStuck(env.Stdout, recs, total, now)
}

func runRedrive(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "redrive", "redrive [flags]")
	o := operate.RedriveRun{Out: env.Stdout, Audit: env.Stderr}
	var codes, ids string
	f.Bool(&o.DryRun, "dry-run", "", false, "count what would move; move nothing")
	f.String(&codes, "reason", "", "", "move only entries with these reason codes, comma-separated (invalid, debit_failed, duplicate_failed, conflict, max_receives, too_large)")
	f.String(&ids, "charge-id", "", "", "move only the entries of these charges, comma-separated")
	f.Int(&o.Max, "max", "", 0, "move at most this many (0: all that match)")
	f.Bool(&o.Force, "force", "", false, "also move CONFLICT entries (a charge id reused with another payload; they will conflict again) and entries older than --max-age")
	var retention, maxAge time.Duration
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	f.Duration(&maxAge, "max-age", "", 0, "hold back entries older than this (default: --retention minus 24h, so that the record that stops a second debit still exists when the message comes back)")
	var ac auditConfig
	ac.Bind(f)
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	trail, book, policy, err := ac.open(ctx, env, bc)
	if err != nil {
		return err
	}
	defer trail.Close()
	if o.Codes, err = operate.ParseCodes(codes); err != nil {
		return err
	}
	o.ChargeIDs = cli.SplitList(ids)
	if o.Max < 0 || maxAge < 0 {
		return cli.Usagef("--max and --max-age must not be negative")
	}
	at := operate.RedriveAt(time.Now(), retention)
	o.HoldBack, o.Now, o.Before, o.MaxAge = at.HoldBack, at.Now, at.Before, cmp.Or(maxAge, at.MaxAge)
	if o.MaxAge <= 0 || o.MaxAge >= retention {
		return cli.Usagef("--max-age %s must be positive and shorter than --retention %s", o.MaxAge, retention)
	}
	o.JSON = *asJSON
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	if o.DryRun {
		o.Operator = claimed(env, *opFlag, &ac, book).Name
		return operate.Redrive(ctx, b.Queue, o)
	}
	if policy.On() {
		// What would move decides whether a second operator must approve.
		count := o
		count.DryRun, count.Out, count.JSON = true, io.Discard, false
		n := 0
		count.Visit = func(_ queue.DLQEntry, d queue.RedriveDecision) {
			if d == queue.Move {
				n++
			}
		}
		if err := operate.Redrive(ctx, b.Queue, count); err != nil {
			return err
		}
		if why := policy.Needs(approval.Spec{Kind: approval.Redrive, Force: o.Force}, n); why != "" {
			return needsProposal(trail, claimed(env, *opFlag, &ac, book), "redrive", why, proposeRedrive(codes, ids, o.Force))
		}
		o.Max = cmp.Or(o.Max, n) // never more than was counted for the policy
	}
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil {
		return err
	}
	o.Operator = who.Name
	return actAudited(env, trail, who, "redrive", "", codes, func(w io.Writer) error {
		o.Audit = w
		return operate.Redrive(ctx, b.Queue, o)
	})
}

func runStatus(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "status", "status [flags]")
	var metricsURL string
	f.String(&metricsURL, "metrics-url", "IC_METRICS_URL", "http://127.0.0.1:9090/metrics", "a consumer's /metrics on this host, for its circuit state (\"\": skip)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	rep, err := status.Collect(ctx, status.Sources{Backend: b.Desc, Queue: b.Queue, Store: b.Store, MetricsURL: metricsURL, Now: time.Now()})
	if err != nil {
		return fmt.Errorf("backend unreachable: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(rep)
	}
	status.Print(env.Stdout, rep)
	return nil
}

// proposeRedrive is the approvals propose command of a redrive's flags.
func proposeRedrive(codes, ids string, force bool) string {
	w := []string{"redrive"}
	if codes != "" {
		w = append(w, "--reason-code "+codes)
	}
	if ids != "" {
		w = append(w, "--charge-id "+ids)
	}
	if force {
		w = append(w, "--force")
	}
	return strings.Join(append(w, `--reason "…why…"`), " ")
}

// claimed is who acts, for the audit line of a refusal: the person her
// token names where it does, else who she says she is (unverified).
func claimed(env *cli.Env, opFlag string, ac *auditConfig, book *approval.Book) approval.Actor {
	if who, err := ac.who(env, opFlag, book, ""); err == nil {
		return who
	}
	name, err := cli.WhoActs(env, opFlag)
	if err != nil {
		name = "unknown"
	}
	return approval.Actor{Name: name + " (unverified)", Via: "cli"}
}
