package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// runRenotify sends the pre-debit notices that failed after a successful
// debit (DEBITED_NOTIFICATION_FAILED records), with the same notification
// key, and on success records DEBITED with an audit line: one conditional
// write on the record as read. It never calls the bank.
func runRenotify(ctx context.Context, env *cli.Env, args []string) error {
	f, bc, asJSON := opsFlags(env, "renotify", "renotify [flags] (CHARGE_ID… | --all)")
	var (
		all, dryRun bool
		reason      string
		limit       int
		timeout     time.Duration
		lease, skew time.Duration
		retention   time.Duration
		nc          pipeline.NotifyConfig
		lc          cli.LogConfig
	)
	f.Bool(&all, "all", "", false, "every DEBITED_NOTIFICATION_FAILED record (oldest first, at most --limit)")
	f.Bool(&dryRun, "dry-run", "", false, "list what would be sent; send nothing, change nothing")
	f.String(&reason, "reason", "", "missed pre-debit notification resent", "why (kept in each record's history and the audit log), e.g. \"INC-77: SMS gateway back\"")
	f.Int(&limit, "limit", "", 1000, "with --all: at most this many")
	f.Duration(&timeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "how long one notification may take")
	f.Duration(&lease, "lease", "", time.Minute, "how long a run holds the claim of a notice it sends (at least twice --notify-timeout): another run at once skips that notice; one that stopped is taken over after this")
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long a notice's claim is kept (as serve's records)")
	f.Duration(&skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "a lapsed claim is taken over only this long after it ends (the largest clock difference between hosts)")
	nc.Bind(f)
	lc.Bind(f)
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
	who, err := ac.who(env, *opFlag, book, "")
	if err != nil && !dryRun {
		return err
	}
	operator := who.Name
	ids := f.Args()
	switch {
	case all && len(ids) > 0:
		return cli.Usagef("give CHARGE_IDs or --all, not both")
	case !all && len(ids) == 0:
		return cli.Usagef("give the CHARGE_IDs to notify again, or --all")
	case limit < 1 || timeout <= 0:
		return cli.Usagef("--limit and --notify-timeout must be positive")
	case lease < 2*timeout:
		return cli.Usagef("--lease %s must be at least twice --notify-timeout %s: a notice's claim must outlast its send", lease, timeout)
	case retention <= 0:
		return cli.Usagef("--retention must be positive")
	case skew < 0 || skew >= lease:
		return cli.Usagef("--skew-margin %s must be at least 0 and shorter than --lease %s", skew, lease)
	}
	var p cli.Problems
	if !dryRun {
		nc.Check(&p)
	}
	lc.Check(&p)
	if err := p.Err(); err != nil {
		return err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.Close()
	_, ok1 := b.Store.(driver.Amender)
	_, ok2 := b.Store.(driver.ResultLister)
	if !ok1 || !ok2 {
		return fmt.Errorf("the %s store cannot amend or list results", cmp.Or(bc.Store, bc.Kind))
	}
	now := time.Now()
	recs, err := operate.Pending(ctx, b.Store, ids, all, limit, now)
	if err != nil {
		return err
	}
	if why := policy.Needs(approval.Spec{Kind: approval.Renotify}, len(recs)); why != "" && !dryRun {
		return needsProposal(trail, who, "renotify", why, `renotify --reason "…why…"`+map[bool]string{true: "", false: " --charge-id " + strings.Join(ids, ",")}[all])
	}
	var sender charge.NoticeSender
	if !dryRun {
		if sender, err = keptNoticeSender(ctx, nc, timeout, lc.Logger(env.Stderr)); err != nil {
			return err
		}
	}
	if skew == 0 {
		skew = -1 // the guard's "no margin"
	}
	rn, err := operate.NewRenotifier(b.Store, sender, operate.RenotifierOptions{Lease: lease, SkewMargin: skew, Retention: retention,
		Timeout: timeout, Channel: nc.Channel})
	if err != nil {
		return err
	}
	run := operate.RenotifyRun{Operator: operator, Reason: reason, DryRun: dryRun, JSON: *asJSON, Now: now, Out: env.Stdout, Audit: env.Stderr}
	if dryRun {
		return rn.Renotify(ctx, recs, run)
	}
	return actAudited(env, trail, who, "renotify", "", reason, func(w io.Writer) error {
		run.Audit = w
		return rn.Renotify(ctx, recs, run)
	})
}

// keptNoticeSender is the channel of nc as a sender of kept notices (the
// ones DEBITED_NOTIFICATION_FAILED records keep), for renotify.
func keptNoticeSender(ctx context.Context, nc pipeline.NotifyConfig, timeout time.Duration, log *slog.Logger) (charge.NoticeSender, error) {
	n, _, err := nc.Notifier(ctx, pipeline.Config{NotifyTimeout: timeout}, log)
	if err != nil {
		return nil, err
	}
	s, ok := n.(charge.NoticeSender)
	if !ok {
		return nil, fmt.Errorf("--notify %s cannot send a kept notice", nc.Channel)
	}
	return s, nil
}
