package backend

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// SweepConfig is how serve deletes what is past retention on a backend
// that does not do it itself (the embedded file; DynamoDB has TTL and SQS
// its MessageRetentionPeriod).
type SweepConfig struct {
	Interval time.Duration // 0: never
	Batch    int           // rows deleted per write
	Pause    time.Duration // between two writes
}

// Bind registers the sweep flags.
func (c *SweepConfig) Bind(f *cli.FlagSet) {
	f.Duration(&c.Interval, "sweep-interval", "IC_SWEEP_INTERVAL", time.Minute, "how often records and messages past retention are deleted (embedded; 0: never)")
	f.Int(&c.Batch, "sweep-batch", "IC_SWEEP_BATCH", 500, "rows deleted per write while sweeping")
	f.Duration(&c.Pause, "sweep-pause", "IC_SWEEP_PAUSE", time.Second, "pause between two sweeping writes (rate limit: the consumer's writes go first)")
}

// Check reports what is wrong with c.
func (c *SweepConfig) Check(p *cli.Problems) {
	if c.Interval < 0 || c.Batch < 1 || c.Batch > 100000 || c.Pause < 0 {
		p.Add("--sweep-interval must not be negative, --sweep-batch must be 1-100000, --sweep-pause not negative")
	}
}

// CheckRetention refuses a record retention that a message can outlive: a
// message redriven from the DLQ near the end of its retention must still
// find its charge's record, or it is claimed afresh and debited again.
func CheckRetention(ctx context.Context, b *Backend, recordRetention time.Duration) error {
	q, d, err := b.Retentions(ctx)
	if err != nil {
		return fmt.Errorf("read the queues' retention: %w", err)
	}
	if recordRetention < q+d {
		return cli.Usagef("--retention %s is shorter than the queue's message retention %s plus the DLQ's %s: a message redriven late could find its record gone and be debited again; set --retention to at least %s",
			recordRetention, q, d, q+d)
	}
	return nil
}

// SweepCounts is what one sweep deleted.
type SweepCounts struct {
	Records     int `json:"records"`
	Messages    int `json:"messages"`
	DLQMessages int `json:"dlq_messages"`
}

// Sweep deletes everything past retention at now, batch rows per write,
// pausing between writes; it stops early when ctx ends.
func Sweep(ctx context.Context, b *Backend, store driver.Store, now time.Time, c SweepConfig) (SweepCounts, error) {
	var got SweepCounts
	pause := func() bool {
		if c.Pause <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(c.Pause)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if p, ok := store.(driver.Purger); ok {
		for {
			n, err := p.Purge(ctx, now, c.Batch)
			got.Records += n
			if err != nil {
				return got, err
			}
			if n < c.Batch || !pause() {
				break
			}
		}
	}
	if b.Expirer != nil {
		for {
			m, d, err := b.Expirer.Expire(ctx, now, c.Batch)
			got.Messages += m
			got.DLQMessages += d
			if err != nil {
				return got, err
			}
			if (m < c.Batch && d < c.Batch) || !pause() {
				break
			}
		}
	}
	return got, nil
}

// RunSweeper sweeps every c.Interval until ctx ends, reporting each sweep.
func RunSweeper(ctx context.Context, b *Backend, store driver.Store, c SweepConfig, log *slog.Logger, report func(SweepCounts)) {
	if c.Interval <= 0 {
		return
	}
	_, purges := store.(driver.Purger)
	if !purges && b.Expirer == nil {
		return // the backend expires records and messages itself
	}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		got, err := Sweep(ctx, b, store, time.Now(), c)
		if report != nil {
			report(got)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("retention sweep failed; trying again next interval", "error", err)
			continue
		}
		if got != (SweepCounts{}) {
			log.Info("retention sweep", "records_purged", got.Records, "messages_expired", got.Messages, "dlq_messages_expired", got.DLQMessages)
		}
	}
}
