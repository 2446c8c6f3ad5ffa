package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Preflight is what serve checks before its first claim, 15s each: the
// store, the queue and the DLQ answer; a multi-Region table is safe to
// claim in (two Regions must not both win one claim); the queues keep
// messages no longer than records are kept (retention).
func (b *Backend) Preflight(ctx context.Context, retention time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err := b.Ready(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("backend not ready: %w", err)
	}
	rctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	err = CheckMultiRegion(rctx, b) // before the first claim: two Regions must not both win one
	cancel()
	if err != nil {
		return err
	}
	rctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return CheckRetention(rctx, b, retention)
}

// Watch starts, until ctx ends, what serve runs beside the consumer: the
// retention sweep (sc), counted in m, and every interval a sample of the
// queue depth and, where counting is cheap, of the claims stuck past their
// lease. It returns at once.
func Watch(ctx context.Context, b *Backend, sc SweepConfig, m *metrics.Metrics, interval time.Duration, log *slog.Logger) {
	go RunSweeper(ctx, b, b.Store, sc, log, func(c SweepCounts) { m.Swept(c.Records, c.Messages, c.DLQMessages) })
	go m.QueueDepth(ctx, interval, b.Queue.Depth, func(err error) { log.Warn("queue depth sample failed", "error", err) })
	if sl, ok := b.Store.(driver.StuckLister); ok && b.CheapCounts() {
		go m.StuckClaims(ctx, interval, func(ctx context.Context) (int, error) { _, n, err := sl.Stuck(ctx, time.Now(), 1); return n, err },
			func(err error) { log.Warn("stuck claims sample failed", "error", err) })
	}
}

// PurgeNow is chargerecovery purge: the sweep by hand, at now, or with
// dry only the count of what is past retention. none says the backend
// expires records and messages itself (nothing to do).
func PurgeNow(ctx context.Context, b *Backend, sc SweepConfig, dry bool, now time.Time) (got SweepCounts, none bool, err error) {
	purger, purges := b.Store.(driver.Purger)
	if !purges && b.Expirer == nil {
		return got, true, nil
	}
	if !dry {
		sc.Interval = 0
		got, err = Sweep(ctx, b, b.Store, now, sc)
		return got, false, err
	}
	if purges {
		if got.Records, err = purger.Expired(ctx, now); err != nil {
			return got, false, err
		}
	}
	if b.Expirer != nil {
		if got.Messages, got.DLQMessages, err = b.Expirer.Expired(ctx, now); err != nil {
			return got, false, err
		}
	}
	return got, false, nil
}

// PurgeRun is one chargerecovery purge: the sweep's settings, DryRun
// (count only), JSON (print JSON) and Now (the zero time: the clock's).
type PurgeRun struct {
	Sweep  SweepConfig
	DryRun bool
	JSON   bool
	Now    time.Time
}

// Purge runs PurgeNow and prints what it deleted, or would, on out.
func Purge(ctx context.Context, b *Backend, r PurgeRun, out io.Writer) error {
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	got, none, err := PurgeNow(ctx, b, r.Sweep, r.DryRun, r.Now)
	if err != nil {
		return err
	}
	if none {
		fmt.Fprintln(out, "nothing to do: this backend expires records (DynamoDB TTL on attribute ttl) and messages (SQS MessageRetentionPeriod) itself")
		return nil
	}
	if r.JSON {
		return json.NewEncoder(out).Encode(struct {
			SweepCounts
			DryRun bool `json:"dry_run"`
		}{got, r.DryRun})
	}
	verb := "deleted"
	if r.DryRun {
		verb = "would delete"
	}
	fmt.Fprintf(out, "past retention: %s %d idempotency record(s), %d queue message(s), %d DLQ message(s)\n",
		verb, got.Records, got.Messages, got.DLQMessages)
	return nil
}
