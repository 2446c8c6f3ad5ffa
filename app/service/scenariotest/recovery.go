package scenariotest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/calendar"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// The recovery policy's scenarios (docs/operations/recovery-policy.md):
// the retry schedule, notice first, and restarts in every wait. Time runs
// for real, in units of a few hundred milliseconds (seconds on an
// emulator, whose visibility timeouts are whole seconds).

// unit is the scenarios' time step on h.
func unit(h Harness) time.Duration {
	if h.Emulated {
		return 2 * time.Second
	}
	return 400 * time.Millisecond
}

// retryEvery is a retry schedule of the code, every d, n times, without jitter.
func retryEvery(code string, d time.Duration, n int) *charge.RetryPolicy {
	return &charge.RetryPolicy{Rules: []charge.RetryRule{{Code: code, Delay: d, Retries: n}}, Jitter: charge.NoJitter}
}

// receives records the highest receive count a delivery reached the
// handler with, and the decisions taken.
type receives struct {
	mu    sync.Mutex
	max   int
	waits int
}

func (r *receives) onDecision(m queue.Message, d consumer.Decision, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.max = max(r.max, m.ReceiveCount)
	if d.Action == consumer.Wait {
		r.waits++
	}
}

func (r *receives) get() (maxCount, waits int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max, r.waits
}

// untilState waits for id's record to reach state (60s at most).
func (p *pipeline) untilState(t *testing.T, id string, state driver.State) driver.Record {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := p.guard.Get(t.Context(), id)
		if err == nil && r.State == state {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %s: %+v (%v), want %s; outcomes %v", id, r, err, state, p.snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Declined INSUFFICIENT_FUNDS twice, then funded: posted once, under the
// third bank-key generation, DONE with three history lines (one per
// attempt); no delivery reached the handler above receive count 2, and
// nothing went to the DLQ.
func declinedTwiceThenFunded(t *testing.T, h Harness) {
	u := unit(h)
	p := newPipeline(t, h, config{faults: corebanksim.Faults{DeclineAccounts: map[string]string{"001111111111": "INSUFFICIENT_FUNDS*2"}},
		retry: retryEvery("INSUFFICIENT_FUNDS", u, 3)})
	c := fee("CHG-RETRY", "001111111111", 2500)
	p.send(t, c, 1)
	var rc receives
	stop := p.run(t, consumer.Options{Concurrency: 2, OnDecision: rc.onDecision})
	r := p.untilState(t, c.ID, driver.StateDone)
	p.drained(t)
	stop()
	p.wantPostedOnce(t, charge.BankKey(c.ID, 3))
	for gen := 1; gen <= 3; gen++ {
		if n := p.ledger.Calls(charge.BankKey(c.ID, gen)); n != 1 {
			t.Fatalf("generation %d: %d debit requests, want 1", gen, n)
		}
	}
	if r.Generation != 3 || len(r.History) != 3 || !strings.Contains(r.History[2], "debited") || r.Status != string(charge.Debited) {
		t.Fatalf("record %+v, want DEBITED under generation 3 with three history lines", r)
	}
	if maxCount, waits := rc.get(); maxCount > 2 || waits < 2 {
		t.Fatalf("highest receive count at the handler %d (want ≤ 2), waits %d (want ≥ 2)", maxCount, waits)
	}
	if d := p.dlq(t); len(d) != 0 {
		t.Fatalf("DLQ %v, want empty", d)
	}
}

// A hard decline is final even where a schedule retries other codes.
func hardDeclineNotRetried(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{faults: corebanksim.Faults{DeclineAccounts: map[string]string{"009999999999": "ACCOUNT_CLOSED"}},
		retry: retryEvery("INSUFFICIENT_FUNDS", unit(h), 3)})
	c := fee("CHG-HARD", "009999999999", 2500)
	p.send(t, c, 1)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	p.untilState(t, c.ID, driver.StateFailed)
	p.drained(t)
	stop()
	if n := p.ledger.Calls(c.ID); n != 1 || p.ledger.Calls(charge.BankKey(c.ID, 2)) != 0 || len(p.ledger.Entries()) != 0 {
		t.Fatalf("%d requests under the first key, ledger %v: want one declined request and no retry", n, p.ledger.Entries())
	}
	if d := p.dlq(t); d["debit_failed"] != 1 || len(d) != 1 {
		t.Fatalf("DLQ %v, want the one debit_failed", d)
	}
}

// A schedule that runs out ends FAILED retries_exhausted, dead-lettered,
// after exactly its attempts, each under a key of its own.
func retriesExhausted(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{faults: corebanksim.Faults{DeclineAccounts: map[string]string{"002222222222": "INSUFFICIENT_FUNDS"}},
		retry: retryEvery("INSUFFICIENT_FUNDS", unit(h), 2)})
	c := fee("CHG-BROKE", "002222222222", 2500)
	p.send(t, c, 1)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	r := p.untilState(t, c.ID, driver.StateFailed)
	p.drained(t)
	stop()
	if !strings.HasPrefix(r.Detail, "retries_exhausted: ") || r.Generation != 3 || len(r.History) != 3 {
		t.Fatalf("record %+v, want FAILED retries_exhausted after three attempts, three history lines", r)
	}
	for gen := 1; gen <= 4; gen++ {
		want := 1
		if gen == 4 {
			want = 0
		}
		if n := p.ledger.Calls(charge.BankKey(c.ID, gen)); n != want {
			t.Fatalf("generation %d: %d requests, want %d", gen, n, want)
		}
	}
	if d := p.dlq(t); d["debit_failed"] != 1 || len(d) != 1 {
		t.Fatalf("DLQ %v, want the one debit_failed", d)
	}
}

// failingAdvance refuses the first n advance notices, then sends them.
type failingAdvance struct {
	n    atomic.Int64
	next charge.AdvanceNotifier
}

func (f *failingAdvance) NotifyAdvance(ctx context.Context, n charge.AdvanceNotice) error {
	if f.n.Add(-1) >= 0 {
		return context.DeadlineExceeded
	}
	return f.next.NotifyAdvance(ctx, n)
}

// Notice first: the advance notice goes out before the debit, by the
// lead; one that cannot be sent holds the debit back until it is; no
// notification follows the debit.
func noticeFirst(t *testing.T, h Harness) {
	lead := 2 * unit(h)
	fa := &failingAdvance{}
	fa.n.Store(2)
	p := newPipeline(t, h, config{noticeLead: lead, advance: fa})
	fa.next = p.notes
	c := fee("CHG-NOTICE", "001234567890", 2500)
	p.send(t, c, 2)
	stop := p.run(t, consumer.Options{Concurrency: 2})
	r := p.untilState(t, c.ID, driver.StateDone)
	p.drained(t)
	stop()
	p.wantPostedOnce(t, c.ID)
	adv := p.notes.Advances()
	if len(adv) != 1 || p.notes.AdvanceCount(adv[0].Key) != 1 || fa.n.Load() >= 0 {
		t.Fatalf("advance notices %+v (refused first: %d left), want the one sent after two refusals", adv, fa.n.Load())
	}
	posted := p.ledger.Entries()[0].PostedAt
	if posted.Before(adv[0].DebitOnOrAfter) {
		t.Fatalf("debited at %v, before the notice's %v", posted, adv[0].DebitOnOrAfter)
	}
	if len(p.notes.Sent()) != 0 {
		t.Fatalf("notifications after the debit %+v, want none (the customer was told before)", p.notes.Sent())
	}
	if r.Status != string(charge.Debited) || len(r.History) != 2 {
		t.Fatalf("record %+v, want DEBITED with the notice's and the debit's lines", r)
	}
}

// A restart in every wait loses nothing: the consumer is stopped while
// the charge waits for its notice's lead, and again while it waits for a
// retry; a new one finishes it with one notice and one debit.
func restartInEveryWait(t *testing.T, h Harness) {
	u := unit(h)
	p := newPipeline(t, h, config{faults: corebanksim.Faults{DeclineAccounts: map[string]string{"003333333333": "INSUFFICIENT_FUNDS*1"}},
		retry: retryEvery("INSUFFICIENT_FUNDS", 2*u, 3), noticeLead: 2 * u})
	c := fee("CHG-RESTART", "003333333333", 2500)
	p.send(t, c, 1)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	r := p.untilState(t, c.ID, driver.StateWaiting)
	stop() // waiting for the notice's lead
	if r.Status != string(charge.NoticeSent) || len(p.ledger.Entries()) != 0 {
		t.Fatalf("first wait %+v, ledger %v; want NOTICE_SENT and nothing debited", r, p.ledger.Entries())
	}
	stop = p.run(t, consumer.Options{Concurrency: 1})
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := p.guard.Get(t.Context(), c.ID)
		if err == nil && r.State == driver.StateWaiting && r.Status == string(charge.RetryScheduled) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %+v (%v), want the retry scheduled", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop() // waiting for the retry
	stop = p.run(t, consumer.Options{Concurrency: 1})
	r = p.untilState(t, c.ID, driver.StateDone)
	p.drained(t)
	stop()
	p.wantPostedOnce(t, charge.BankKey(c.ID, 2))
	if adv := p.notes.Advances(); len(adv) != 1 {
		t.Fatalf("advance notices %+v, want one across the restarts", adv)
	}
	if r.Generation != 2 || len(r.History) != 3 {
		t.Fatalf("record %+v, want generation 2 with the notice's, the decline's and the debit's lines", r)
	}
}

// steppedClock is a wall clock an operator sets by hand (the posting
// calendar's Clock): After polls, so that a gate waiting on it sees the
// time moved at once.
type steppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *steppedClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *steppedClock) After(time.Duration) <-chan time.Time {
	return time.After(10 * time.Millisecond)
}

// Charges that arrive outside the posting window are not received at all
// (no debit, no receive count), and when the window opens each is posted
// once, none received more than twice.
func outsideThePostingWindow(t *testing.T, h Harness) {
	n := 1000
	if h.Emulated {
		n = 200
	}
	cal, err := calendar.Parse("Mon-Fri 06:00-20:00 Asia/Kolkata", calendar.Holidays{})
	if err != nil {
		t.Fatal(err)
	}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	clock := &steppedClock{now: time.Date(2026, 11, 28, 10, 0, 0, 0, kolkata)} // a Saturday
	p := newPipeline(t, h, config{})
	ids := make([]string, n)
	msgs := make([]queue.Outgoing, 0, 10)
	for i := range n {
		ids[i] = fmt.Sprintf("CHG-WIN-%04d", i)
		b, err := charge.MarshalEvent(fee(ids[i], "001234567890", 2500))
		if err != nil {
			t.Fatal(err)
		}
		if msgs = append(msgs, queue.Outgoing{Body: b}); len(msgs) == 10 || i == n-1 {
			if sent, err := p.b.Queue.SendBatch(t.Context(), msgs); err != nil || sent != len(msgs) {
				t.Fatalf("send: %d of %d, %v", sent, len(msgs), err)
			}
			msgs = msgs[:0]
		}
	}
	var rc receives
	stop := p.run(t, consumer.Options{Concurrency: 8, Gate: calendar.NewGate(cal, clock), OnDecision: rc.onDecision})
	time.Sleep(5 * unit(h)) // the weekend, compressed: the consumer is running and receives nothing
	d, err := p.b.Queue.Depth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if calls := len(p.ledger.Entries()); calls != 0 || d.InFlight != 0 || d.Waiting != n {
		t.Fatalf("outside the window: %d postings, depth %+v; want none posted, all %d waiting, none received", calls, d, n)
	}
	clock.Set(time.Date(2026, 11, 30, 6, 0, 0, 0, kolkata)) // Monday's window opens
	p.drained(t)
	stop()
	p.wantPostedOnce(t, ids...)
	if maxCount, _ := rc.get(); maxCount > 2 {
		t.Fatalf("a charge reached the handler at receive count %d, want ≤ 2", maxCount)
	}
}
