package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/queue"
)

// The month-end mode (--profile): instead of enqueuing every charge first,
// a producer sends them while the consumer runs, at the rates of a burst
// profile (a fifth of 60M charges due in six hours, compressed), with the
// redeliveries --dup-lag messages after their originals, to a bank that
// slows down as more debits are in flight (--corebank-load-latency). The
// report adds the backlog curve, the time each charge waited from its
// sending to its debit, and the peak memory; exactly-once is checked as in
// every run.

// phase is one part of a profile: Rate charges a second for Dur.
type phase struct {
	Dur  time.Duration `json:"-"`
	Rate int           `json:"rate"`
	Secs float64       `json:"seconds"`
}

// DefaultProfile is month-end compressed: a quiet start, the peak hours at
// several times the consumer's sustainable rate on a 2-core machine, and a
// tail.
const DefaultProfile = "5s@1000,10s@8000,15s@2000"

// parseProfile reads "DUR@RATE,…" (e.g. 5s@1000,10s@8000).
func parseProfile(s string) ([]phase, error) {
	var out []phase
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		d, r, ok := strings.Cut(part, "@")
		if !ok {
			return nil, fmt.Errorf("%q is not DURATION@RATE (e.g. 10s@5000)", part)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return nil, fmt.Errorf("%q: the duration must be positive, like 10s", part)
		}
		rate, err := strconv.Atoi(r)
		if err != nil || rate < 1 || rate > 1_000_000 {
			return nil, fmt.Errorf("%q: the rate must be a whole number of charges a second, 1-1000000", part)
		}
		out = append(out, phase{Dur: dur, Rate: rate, Secs: dur.Seconds()})
	}
	return out, nil
}

// profileCharges is how many charges a profile sends.
func profileCharges(ps []phase) int {
	n := 0.0
	for _, p := range ps {
		n += p.Dur.Seconds() * float64(p.Rate)
	}
	return int(n)
}

// due is how many charges the profile has sent by elapsed.
func due(ps []phase, elapsed time.Duration) int {
	n, at := 0.0, time.Duration(0)
	for _, p := range ps {
		in := min(max(elapsed-at, 0), p.Dur)
		n += in.Seconds() * float64(p.Rate)
		at += p.Dur
	}
	return int(n)
}

// at is what the sending order puts at position i: the original charge
// i (when i < charges) and the redelivery of charge i-dupLag (when it is
// one of the duplicated); -1 where there is none.
func at(i int, c benchConfig) (orig, dup int) {
	orig, dup = -1, -1
	if i < c.charges {
		orig = i
	}
	if j := i - c.dupLag; j >= 0 && j < c.charges && duplicated(j, c.dupRatio) {
		dup = j
	}
	return orig, dup
}

// producer sends a run's charges by the profile, and remembers when each
// original was sent.
type producer struct {
	sent   atomic.Int64   // messages
	sentAt []atomic.Int64 // per charge, Unix nanoseconds of its first send
}

func newProducer(charges int) *producer { return &producer{sentAt: make([]atomic.Int64, charges)} }

// run sends until every position is sent, pacing the originals by the
// profile (every 20 ms, what is due so far, in one batch).
func (p *producer) run(ctx context.Context, q queue.Sender, c benchConfig, runID string, start time.Time) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := c.charges + c.dupLag
	for i := 0; i < last; {
		target := min(due(c.profile, time.Since(start)), c.charges)
		if target >= c.charges {
			target = last // the profile is over: the last redeliveries too
		}
		var batch []queue.Outgoing
		var fresh []int
		for ; i < target; i++ {
			orig, dup := at(i, c)
			for _, j := range []int{orig, dup} {
				if j < 0 {
					continue
				}
				body, err := charge.MarshalEvent(benchCharge(runID, j))
				if err != nil {
					return err
				}
				batch = append(batch, queue.Outgoing{Body: body})
				if j == orig {
					fresh = append(fresh, j)
				}
			}
		}
		for len(batch) > 0 {
			n := min(len(batch), 1000)
			now := time.Now().UnixNano()
			if _, err := q.SendBatch(ctx, batch[:n]); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			p.sent.Add(int64(n))
			batch = batch[n:]
			for _, j := range fresh {
				p.sentAt[j].CompareAndSwap(0, now)
			}
			fresh = nil
		}
		if i >= last {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// CurvePoint is one sample of the backlog.
type CurvePoint struct {
	Seconds float64 `json:"t"`
	Sent    int64   `json:"sent"`
	Decided int64   `json:"decided"`
	// Backlog is sent and not yet decided (waiting or in flight).
	Backlog int64 `json:"backlog"`
}

// BurstStats is what the month-end mode adds to a run's report.
type BurstStats struct {
	Profile          []phase      `json:"profile"`
	LoadLatencyUS    float64      `json:"corebank_load_latency_us_per_debit_in_flight"`
	MaxBacklog       int64        `json:"max_backlog"`
	TimeToDebitMS    latencyMS    `json:"time_to_debit_ms"`
	DrainedAfterSecs float64      `json:"drained_after_profile_seconds"`
	Curve            []CurvePoint `json:"backlog_curve"`
}
