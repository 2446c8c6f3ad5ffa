package main

import (
	"context"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"io"
	"time"
	_ "time/tzdata" // the image is FROM scratch: --time-zone needs the zone database inside the binary

	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/recon"
	"github.com/finedge/idempotent-consumer/idempotency"
)

func runReconcile(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 && args[0] == "resolve" {
		return runReconcileResolve(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	f, bc, asJSON := opsFlags(env, "reconcile", recon.Synopsis)
	var src recon.Source
	var asCSV bool
	var o recon.RunOptions
	src.Bind(f)
	f.Duration(&o.SkewMargin, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "an IN_PROGRESS record posted by the bank counts as in flight (not a break) until its lease passed by this much (as serve's)")
	f.Bool(&asCSV, "csv", "", false, "print the breaks as CSV (accounts masked)")
	f.String(&o.MetricsFile, "metrics-file", "IC_RECONCILE_METRICS_FILE", "", "also write reconciliation_breaks{kind} and the run's figures in Prometheus's text format to this file (node_exporter's textfile collector), whole by rename")
	f.String(&o.ReportFile, "report-file", "IC_RECONCILE_REPORT_FILE", "", "also keep the report as JSON in this file (owner-only, whole by rename): the console's Reconciliation page reads it (console --reconcile-report-file) and resolves its breaks against the same statement")
	f.Int(&o.Concurrency, "concurrency", "", 16, "records read at once")
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if *asJSON && asCSV {
		return cli.Usagef("--json or --csv, not both")
	}
	if err := o.Check(); err != nil {
		return err
	}
	src.Files = f.Args()
	st, err := src.Open(time.Now())
	if err != nil {
		return err
	}
	b, err := backend.OpenExisting(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	o.Store = b.Store
	return recon.Run(ctx, st, o, recon.Printer(env.Stdout, *asJSON, asCSV))
}

func runReconcileResolve(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "reconcile resolve", recon.Synopsis)
	var src recon.Source
	r := recon.ResolveRequest{Log: env.Stderr}
	src.Bind(f)
	f.String((*string)(&r.Kind), "kind", "", "", "which break, when the charge has several: "+recon.KindList())
	f.Bool(&r.Unverified, "unverified", "", false, "adopt a posting that could not be checked against the charge (no narrative, or no fingerprint key): you checked its amount and account by hand")
	f.Bool(&r.NoticeSent, "notice-sent", "", false, "an adopted posting's pre-debit notice is known to have gone out: record DEBITED (default: DEBITED_NOTIFICATION_FAILED with the notice kept, for renotify)")
	f.Bool(&r.Refunded, "refunded", "", false, "failed_but_posted: the bank gave the money back: mark the break (the record stays FAILED); by default the posting is recorded as collected (DONE, never debited again)")
	f.String(&r.Reason, "reason", "", "", "why it is resolved (kept with the resolution and in the audit trail), e.g. \"INC-88: refunded by the bank\" (required)")
	f.Duration(&r.Lease, "lease", "IC_LEASE", idempotency.DefaultLease, "the claim an adoption takes on the record while it writes DONE (as serve's)")
	f.Duration(&r.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long the adopted record and the resolution are kept (as serve's records)")
	f.Duration(&r.SkewMargin, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "a lapsed claim is taken over only this long after it ends (as serve's)")
	var ac auditConfig
	ac.Bind(f)
	opFlag := cli.OperatorFlag(f)
	if err := f.Parse(args, true); err != nil {
		return err
	}
	if len(f.Args()) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery reconcile -h)")
	}
	r.ChargeID = f.Args()[0]
	if err := r.Check(); err != nil {
		return err
	}
	st, err := src.Open(time.Now())
	if err != nil {
		return err
	}
	trail, book, _, err := ac.open(ctx, env, bc)
	if err != nil {
		return err
	}
	defer trail.Close()
	b, err := backend.OpenExisting(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	r.Session = ac.s
	r.Who = func() (approval.Actor, error) { return ac.who(env, *opFlag, book, "") }
	r.Claimed = func() approval.Actor { return claimed(env, *opFlag, &ac, book) }
	res, err := recon.Resolve(ctx, b.Store, st, r)
	if err != nil {
		return err
	}
	return printed(env, *asJSON, res, func(w io.Writer) { recon.PrintResolved(w, r.ChargeID, r.Reason, res) })
}
