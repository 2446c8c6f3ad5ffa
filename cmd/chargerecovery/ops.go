package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/service/backend"
	"github.com/finedge/idempotent-consumer/service/cli"
	"github.com/finedge/idempotent-consumer/service/operate"
	"github.com/finedge/idempotent-consumer/service/status"
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

// operatorFlag registers --operator (IC_OPERATOR) on a command that acts.
func operatorFlag(f *cli.FlagSet) *string {
	v := new(string)
	f.String(v, "operator", "IC_OPERATOR", "", "who is acting, named in the audit line (default: the OS user; required where there is none, as in a container)")
	return v
}

// whoActs is the operator an audit line names: --operator, else the OS
// user; a usage error when there is neither (a container has no USER).
func whoActs(env *cli.Env, flag string) (string, error) {
	if s := strings.TrimSpace(flag); s != "" {
		return s, nil
	}
	for _, k := range []string{"SUDO_USER", "USER", "LOGNAME"} {
		if v := strings.TrimSpace(env.Getenv(k)); v != "" {
			return v, nil
		}
	}
	return "", cli.Usagef("who is acting? set --operator NAME (IC_OPERATOR): the audit line names the operator, and this process has no OS user name (USER and LOGNAME are unset)")
}

func openForOps(ctx context.Context, bc *backend.Config) (*backend.Backend, error) {
	var p cli.Problems
	bc.Check(&p)
	if err := p.Err(); err != nil {
		return nil, err
	}
	// An operator command uses what is there: a mistyped --db or
	// --postgres-schema is an error, never a new empty file or schema
	// that reads as "all clear".
	bc.Existing = true
	return backend.Open(ctx, *bc, 30*time.Second, false)
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
	var reason string
	var newAttempt bool
	var retention time.Duration
	f.Bool(&newAttempt, "new-attempt", "", false, "for a charge FAILED by an explicit decline (e.g. INSUFFICIENT_FUNDS, now that funds arrived): debit it under the next bank-key generation (CHARGE_ID~2, ~3, …), since the bank's answer under the old key is final; refused for any other failure")
	f.String(&reason, "reason", "", "", "why the charge is reopened (kept in the record and the audit log; required), e.g. \"INC-4711: gateway token fixed\"")
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long the reopened record is kept")
	opFlag := operatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	operator, err := whoActs(env, *opFlag)
	if err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery %s -h)", f.Name())
	}
	if strings.TrimSpace(reason) == "" {
		return cli.Usagef("--reason is required: say why the charge may be debited now (it stays in the record)")
	}
	if retention < 24*time.Hour {
		return cli.Usagef("--retention %s is under 24h", retention)
	}
	id := f.Args()[0]
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	guard, err := idempotency.NewGuard(b.Store, idempotency.Options{Retention: retention})
	if err != nil {
		return err
	}
	rec, err := guard.Reopen(ctx, id, reason, idempotency.ReopenOptions{NewGeneration: newAttempt,
		Eligible: charge.EligibleForNewGeneration, Operator: operator})
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return fmt.Errorf("no idempotency record for %s (never claimed, or past its retention): nothing to reopen; redriving its message debits it as a new charge", id)
	case errors.Is(err, idempotency.ErrNotFailed):
		return fmt.Errorf("%s is %s, not FAILED: only a FAILED record is reopened (a DONE charge was debited; an IN_PROGRESS one is reclaimed by its next delivery)", id, rec.State)
	case errors.Is(err, idempotency.ErrNotEligible):
		return fmt.Errorf("--new-attempt refused: %w; reopen without --new-attempt retries under the same key", err)
	case err != nil:
		return err
	}
	audit := slog.New(slog.NewJSONHandler(env.Stderr, nil))
	audit.LogAttrs(ctx, slog.LevelWarn, "FAILED charge reopened by an operator",
		slog.Bool("audit", true), slog.String("charge_id", rec.Key), slog.String("reason", reason),
		slog.String("previous_status", rec.PrevStatus), slog.String("previous_detail", rec.PrevDetail),
		slog.Int("attempt", rec.Attempt), slog.Int("reopens", rec.Reopens), slog.Int("generation", rec.Generation),
		slog.String("bank_key", charge.BankKey(rec.Key, rec.Generation)), slog.String("operator", operator))
	if *asJSON {
		return json.NewEncoder(env.Stdout).Encode(status.RecordJSONOf(rec, time.Now()))
	}
	fmt.Fprintf(env.Stdout, "reopened %s (was %s: %s); its next delivery claims it afresh under bank key %s (generation %d).\n",
		rec.Key, rec.PrevStatus, rec.PrevDetail, charge.BankKey(rec.Key, rec.Generation), rec.Generation)
	fmt.Fprintf(env.Stdout, "next: chargerecovery redrive --charge-id %s (moves its dead-lettered message back to the queue)\n\n", rec.Key)
	status.PrintRecord(env.Stdout, rec, time.Now())
	return nil
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
		out := struct {
			Total  int                 `json:"total"`
			Claims []status.RecordJSON `json:"claims"`
		}{Total: total, Claims: []status.RecordJSON{}}
		for _, r := range recs {
			out.Claims = append(out.Claims, status.RecordJSONOf(r, now))
		}
		return json.NewEncoder(env.Stdout).Encode(out)
	}
	fmt.Fprintf(env.Stdout, "%d claim(s) IN_PROGRESS past their lease", total)
	if total == 0 {
		fmt.Fprintln(env.Stdout)
		return nil
	}
	fmt.Fprintf(env.Stdout, " (oldest first, %d shown). Each is reclaimed by its next delivery; if the message is gone, see the DLQ.\n", len(recs))
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHARGE\tLEASE EXPIRED\tOVERDUE\tATTEMPT\tCLAIMED")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.Key, r.LeaseUntil.UTC().Format(time.RFC3339),
			now.Sub(r.LeaseUntil).Round(time.Second), r.Attempt, r.CreatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func runRedrive(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "redrive", "redrive [flags]")
	o := queue.RedriveOptions{HoldBack: chargehandler.HoldBack}
	var codes, ids string
	f.Bool(&o.DryRun, "dry-run", "", false, "count what would move; move nothing")
	f.String(&codes, "reason", "", "", "move only entries with these reason codes, comma-separated (invalid, debit_failed, duplicate_failed, conflict, max_receives, too_large)")
	f.String(&ids, "charge-id", "", "", "move only the entries of these charges, comma-separated")
	f.Int(&o.Max, "max", "", 0, "move at most this many (0: all that match)")
	f.Bool(&o.Force, "force", "", false, "also move CONFLICT entries (a charge id reused with another payload; they will conflict again) and entries older than --max-age")
	var retention time.Duration
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	f.Duration(&o.MaxAge, "max-age", "", 0, "hold back entries older than this (default: --retention minus 24h, so that the record that stops a second debit still exists when the message comes back)")
	opFlag := operatorFlag(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	operator, err := whoActs(env, *opFlag)
	if err != nil && !o.DryRun {
		return err
	}
	if o.Codes, err = codesFlag(codes); err != nil {
		return err
	}
	o.Match = operate.ChargeMatch(splitList(ids))
	if o.Max < 0 || o.MaxAge < 0 {
		return cli.Usagef("--max and --max-age must not be negative")
	}
	if o.MaxAge == 0 {
		o.MaxAge = retention - 24*time.Hour
	}
	if o.MaxAge <= 0 || o.MaxAge >= retention {
		return cli.Usagef("--max-age %s must be positive and shorter than --retention %s", o.MaxAge, retention)
	}
	o.Now = time.Now()
	// Only what was dead-lettered before this run: a charge the consumers
	// dead-letter again while it runs is not moved (and counted) again.
	o.Before = o.Now
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	var moved []string
	o.Moved = func(e queue.DLQEntry) {
		moved = append(moved, cmp.Or(operate.ChargeIDOf(e.Body), "message "+e.ID))
	}
	rep, err := b.Queue.Redrive(ctx, o)
	if !o.DryRun && len(moved) > 0 {
		audit := slog.New(slog.NewJSONHandler(env.Stderr, nil))
		audit.LogAttrs(ctx, slog.LevelWarn, "dead-lettered charges redriven by an operator", slog.Bool("audit", true),
			slog.String("operator", operator), slog.Int("moved", rep.Moved), slog.Any("charges", moved), slog.Any("codes", o.Codes))
	}
	if err != nil {
		return err
	}
	// What the run could not see was neither counted nor moved: it says so
	// and exits 1, never a quiet "seen 0, moved 0".
	unseen := operate.UnseenNote(rep.Unseen, rep.Approximate)
	if *asJSON {
		if err := json.NewEncoder(env.Stdout).Encode(rep); err != nil {
			return err
		}
		if unseen != "" {
			return fmt.Errorf("%s (not moved)", unseen)
		}
		return goneMeanwhile(rep)
	}
	verb := "moved"
	if o.DryRun {
		verb = "would move"
	}
	fmt.Fprintf(env.Stdout, "DLQ entries seen: %d; %s back to the queue: %d; held back (conflicts, need --force): %d; not matching: %d\n",
		rep.Seen, verb, rep.Moved, rep.HeldBack, rep.Skipped)
	if rep.TooOld > 0 {
		fmt.Fprintf(env.Stdout, "held back as too old: %d (older than %s: their idempotency records may be past retention, so a redrive could debit them again; check each with inspect, then --force)\n",
			rep.TooOld, o.MaxAge)
	}
	if len(rep.ByCode) > 0 {
		var parts []string
		for k, v := range rep.ByCode {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(env.Stdout, "%s by reason code: %s\n", verb, strings.Join(parts, " "))
	}
	if unseen != "" {
		return fmt.Errorf("%s (not moved)", unseen)
	}
	return goneMeanwhile(rep)
}

// goneMeanwhile is the error of a redrive some of whose chosen entries had
// left the DLQ when their turn came (another redrive, a purge, expiry;
// on SQS also a hold that may have lapsed): nothing was moved for them.
func goneMeanwhile(rep queue.RedriveReport) error {
	if rep.Gone == 0 {
		return nil
	}
	return fmt.Errorf("%d chosen DLQ entr%s not moved: gone from the DLQ meanwhile (another redrive or a purge), or, on SQS, held too long by this run to move safely; run dlq list, and the redrive again if they are still there",
		rep.Gone, map[bool]string{true: "y was", false: "ies were"}[rep.Gone == 1])
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
