package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// sweepConfig is how serve deletes what is past retention on a backend
// that does not do it itself (the embedded file; DynamoDB has TTL and SQS
// its MessageRetentionPeriod).
type sweepConfig struct {
	interval time.Duration
	batch    int
	pause    time.Duration
}

func (c *sweepConfig) bind(f *flagSet) {
	f.Duration(&c.interval, "sweep-interval", "IC_SWEEP_INTERVAL", time.Minute, "how often records and messages past retention are deleted (embedded; 0: never)")
	f.Int(&c.batch, "sweep-batch", "IC_SWEEP_BATCH", 500, "rows deleted per write while sweeping")
	f.Duration(&c.pause, "sweep-pause", "IC_SWEEP_PAUSE", time.Second, "pause between two sweeping writes (rate limit: the consumer's writes go first)")
}

func (c *sweepConfig) check(p *problems) {
	if c.interval < 0 || c.batch < 1 || c.batch > 100000 || c.pause < 0 {
		p.add("--sweep-interval must not be negative, --sweep-batch must be 1-100000, --sweep-pause not negative")
	}
}

// checkRetention refuses a record retention that a message can outlive: a
// message redriven from the DLQ near the end of its retention must still
// find its charge's record, or it is claimed afresh and debited again.
func checkRetention(ctx context.Context, b *backend, recordRetention time.Duration) error {
	q, d, err := b.retentions(ctx)
	if err != nil {
		return fmt.Errorf("read the queues' retention: %w", err)
	}
	if recordRetention < q+d {
		return usagef("--retention %s is shorter than the queue's message retention %s plus the DLQ's %s: a message redriven late could find its record gone and be debited again; set --retention to at least %s",
			recordRetention, q, d, q+d)
	}
	return nil
}

// sweepCounts is what one sweep deleted.
type sweepCounts struct {
	Records     int `json:"records"`
	Messages    int `json:"messages"`
	DLQMessages int `json:"dlq_messages"`
}

// sweep deletes everything past retention at now, batch rows per write,
// pausing between writes; it stops early when ctx ends.
func sweep(ctx context.Context, b *backend, store idempotency.Store, now time.Time, c sweepConfig) (sweepCounts, error) {
	var got sweepCounts
	pause := func() bool {
		if c.pause <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(c.pause)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if p, ok := store.(idempotency.Purger); ok {
		for {
			n, err := p.Purge(ctx, now, c.batch)
			got.Records += n
			if err != nil {
				return got, err
			}
			if n < c.batch || !pause() {
				break
			}
		}
	}
	if b.expire != nil {
		for {
			m, d, err := b.expire(ctx, now, c.batch)
			got.Messages += m
			got.DLQMessages += d
			if err != nil {
				return got, err
			}
			if (m < c.batch && d < c.batch) || !pause() {
				break
			}
		}
	}
	return got, nil
}

// runSweeper sweeps every c.interval until ctx ends, reporting each sweep.
func runSweeper(ctx context.Context, b *backend, store idempotency.Store, c sweepConfig, log *slog.Logger, report func(sweepCounts)) {
	if c.interval <= 0 {
		return
	}
	_, purges := store.(idempotency.Purger)
	if !purges && b.expire == nil {
		return // the backend expires records and messages itself
	}
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		got, err := sweep(ctx, b, store, time.Now(), c)
		if report != nil {
			report(got)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("retention sweep failed; trying again next interval", "error", err)
			continue
		}
		if got != (sweepCounts{}) {
			log.Info("retention sweep", "records_purged", got.Records, "messages_expired", got.Messages, "dlq_messages_expired", got.DLQMessages)
		}
	}
}

// runPurge is the sweep by hand.
func runPurge(ctx context.Context, env *environment, args []string) error {
	f, bc, asJSON := opsFlags(env, "purge", "purge [flags]")
	var dry bool
	var sc sweepConfig
	f.Bool(&dry, "dry-run", "", false, "count what is past retention; delete nothing")
	sc.bind(f)
	if err := f.parse(args, false); err != nil {
		return err
	}
	var p problems
	sc.check(&p)
	if err := p.err(); err != nil {
		return err
	}
	b, err := openForOps(ctx, bc)
	if err != nil {
		return err
	}
	defer b.close()
	now := time.Now()
	purger, purges := b.store.(idempotency.Purger)
	if !purges && b.expire == nil {
		fmt.Fprintln(env.stdout, "nothing to do: this backend expires records (DynamoDB TTL on attribute ttl) and messages (SQS MessageRetentionPeriod) itself")
		return nil
	}
	var got sweepCounts
	if dry {
		if purges {
			if got.Records, err = purger.Expired(ctx, now); err != nil {
				return err
			}
		}
		if b.expired != nil {
			if got.Messages, got.DLQMessages, err = b.expired(ctx, now); err != nil {
				return err
			}
		}
	} else {
		sc.interval = 0
		if got, err = sweep(ctx, b, b.store, now, sc); err != nil {
			return err
		}
	}
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(struct {
			sweepCounts
			DryRun bool `json:"dry_run"`
		}{got, dry})
	}
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	fmt.Fprintf(env.stdout, "past retention: %s %d idempotency record(s), %d queue message(s), %d DLQ message(s)\n",
		verb, got.Records, got.Messages, got.DLQMessages)
	return nil
}
