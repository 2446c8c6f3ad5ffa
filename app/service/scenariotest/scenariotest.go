// Package scenariotest is the exactly-once scenario suite: the whole
// pipeline (queue → runtime → charge handler → guard → bank simulator) run
// through the situations a duplicate debit would come from, asserting on
// money and records — one posting in the ledger, one DONE record, what sits
// on the DLQ — never on which functions were called. It is written once
// and run over every backend; a new backend joins by adding a Harness.
package scenariotest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Backend is a fresh queue (with its DLQ) and idempotency store.
type Backend struct {
	Queue queue.Queue
	Store driver.Store
	// WriteTooLarge, where the queue can hold them, puts n messages over
	// queue.MaxMessageBytes on the queue around Send (as a producer
	// writing to the table directly would); nil where the queue refuses
	// them itself (SQS).
	WriteTooLarge func(t *testing.T, n int)
}

// Harness opens a new, empty backend per call whose queue uses visibility
// for every receive; it cleans up when the test ends.
type Harness struct {
	Open func(t *testing.T, visibility time.Duration) Backend
	// Separate keeps claims and results store calls of their own where
	// the queue could carry them in its transactions (a queue.ClaimingReceiver
	// that holds the store): the path of --colocate off. By default the
	// scenarios run as serve does, on the queue's transactions there.
	Separate bool
	// Emulated: the backend is an emulator of a remote service (moto, one
	// Python process shared by the whole test run): the scenarios that
	// move volume run a fifth of it, with long leases.
	Emulated bool
}

// Run runs every scenario against h.
func Run(t *testing.T, h Harness) {
	for _, sc := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"SameChargeFiveTimesDebitsOnce", fiveCopies},
		{"DuplicateWhileTheFirstIsStillDebitingIsLeftThenDroppedAsDone", inFlightDuplicate},
		{"ExpiredLeaseOfADeadWorkerIsReclaimedAndDebitedOnce", expiredLease},
		{"CrashAfterTheDebitBeforeDONEPostsNoSecondDebit", crashAfterDebit},
		{"DeclineIsRecordedFailedAndDeadLettered", decline},
		{"MalformedIsDeadLetteredWithoutARecordOrADebit", malformed},
		{"ConflictingPayloadIsDeadLetteredNotDebited", conflict},
		{"TransientFailuresAndLostAnswersUnderConcurrency", transient},
		{"ShutdownMidStreamThenRestartDebitsEveryChargeOnce", shutdownRestart},
		{"OutagesOfTheBankAndTheStoreCostAMessageAtMostOneReceive", outages},
		{"PoisonAmongTheChargesIsDeadLetteredWhileTheRestFlows", poison},
		{"DeclinedTwiceThenFundedIsPostedOnceUnderGeneration3", declinedTwiceThenFunded},
		{"AHardDeclineIsNotRetried", hardDeclineNotRetried},
		{"ARetryScheduleThatRunsOutEndsFailedRetriesExhausted", retriesExhausted},
		{"NoticeFirstTheNoticePrecedesTheDebitAndAFailedNoticeHoldsItBack", noticeFirst},
		{"ARestartInEveryWaitLosesNothing", restartInEveryWait},
		{"ChargesOutsideThePostingWindowArePostedOnceWhenItOpens", outsideThePostingWindow},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.fn(t, h)
		})
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// pipeline is one consumer service over a backend.
type pipeline struct {
	b      Backend
	guard  *idempotency.Guard
	ledger *corebanksim.Ledger
	notes  *notifysim.Recorder
	h      *chargehandler.Handler
	source consumer.Source // the queue, claiming in its receives where it can

	mu       sync.Mutex
	outcomes map[charge.Outcome]int
}

type config struct {
	lease, visibility time.Duration
	faults            corebanksim.Faults
	// The recovery policy: a retry schedule, notice first (advance: the
	// channel of the advance notices; nil: the recorder).
	retry      *charge.RetryPolicy
	noticeLead time.Duration
	advance    charge.AdvanceNotifier
}

func newPipeline(t *testing.T, h Harness, cfg config) *pipeline {
	t.Helper()
	if cfg.lease == 0 {
		cfg.lease = 3 * time.Second
	}
	if cfg.visibility == 0 {
		cfg.visibility = 3 * time.Second
	}
	p := &pipeline{b: h.Open(t, cfg.visibility), ledger: corebanksim.NewLedger(cfg.faults), notes: notifysim.NewRecorder(0, nil),
		outcomes: map[charge.Outcome]int{}}
	var err error
	p.guard, err = idempotency.NewGuard(p.b.Store, idempotency.Options{Lease: cfg.lease, SkewMargin: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: p.guard, Debiter: p.ledger, Notifier: p.notes, Logger: quiet,
		Retry: cfg.retry, NoticeLead: cfg.noticeLead, AdvanceNotifier: cfg.advance})
	if err != nil {
		t.Fatal(err)
	}
	p.h = chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: quiet, InProgressMargin: 50 * time.Millisecond,
		OnResult: func(_ context.Context, _ queue.Message, _ charge.Charge, r charge.Result) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.outcomes[r.Outcome]++
		}})
	p.source = p.b.Queue
	if cr, ok := p.b.Queue.(queue.ClaimingReceiver); ok && !h.Separate && cr.Holds(p.b.Store) {
		p.source = consumer.Claiming(p.b.Queue, cr, p.h.ClaimPolicy(), nil)
	}
	return p
}

// run starts a runtime; stop shuts it down gracefully (idempotent).
func (p *pipeline) run(t *testing.T, opts consumer.Options) (stop func()) {
	t.Helper()
	opts.Logger = quiet
	if opts.Backoff == nil {
		opts.Backoff = func(int) time.Duration { return 50 * time.Millisecond }
	}
	rt, err := consumer.New(p.source, p.h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rt.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (p *pipeline) count(o charge.Outcome) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcomes[o]
}

func (p *pipeline) snapshot() map[charge.Outcome]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[charge.Outcome]int, len(p.outcomes))
	for k, v := range p.outcomes {
		out[k] = v
	}
	return out
}

func (p *pipeline) sendRaw(t *testing.T, body string, copies int) {
	t.Helper()
	for range copies {
		if _, err := p.b.Queue.Send(t.Context(), []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
}

func (p *pipeline) send(t *testing.T, c charge.Charge, copies int) {
	t.Helper()
	b, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	p.sendRaw(t, string(b), copies)
}

// drained waits until the queue holds nothing waiting or in flight, read
// as zero several times in a row: queue counts are approximate, and SQS
// (moto too) counts visible and in-flight messages one after the other, so
// a message whose retry delay ends between the two counts reads as none.
func (p *pipeline) drained(t *testing.T) {
	t.Helper()
	const settled = 5 // zero readings in a row, 20 ms apart
	deadline := time.Now().Add(60 * time.Second)
	for zeros := 0; ; {
		d, err := p.b.Queue.Depth(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d.Waiting+d.InFlight != 0 {
			zeros = 0
		} else if zeros++; zeros == settled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not drained: %+v, outcomes %v", d, p.snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dlq returns the DLQ's entries by reason code, read through the port.
func (p *pipeline) dlq(t *testing.T) map[queue.Code]int {
	t.Helper()
	rep, err := p.b.Queue.Redrive(t.Context(), queue.RedriveOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep.SeenByCode
}

func (p *pipeline) wantRecord(t *testing.T, id string, state driver.State, status charge.Status) driver.Record {
	t.Helper()
	r, err := p.guard.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	if r.State != state || r.Status != string(status) {
		t.Fatalf("record %s = %s/%s, want %s/%s", id, r.State, r.Status, state, status)
	}
	return r
}

// wantPostedOnce checks the ledger holds exactly one posting for each id
// and that no debit request reached the bank after it had confirmed one:
// the simulator honours idempotency keys, so postings alone would hide a
// second request that a bank without keys would post twice.
func (p *pipeline) wantPostedOnce(t *testing.T, ids ...string) {
	t.Helper()
	if dup := p.ledger.DuplicateRequests(); len(dup) != 0 {
		t.Fatalf("debit requests after the bank had confirmed the charge: %v", dup)
	}
	p.wantPostingsOnce(t, ids...)
}

func (p *pipeline) wantPostingsOnce(t *testing.T, ids ...string) {
	t.Helper()
	got := p.ledger.PostingsByKey()
	if len(got) != len(ids) {
		t.Fatalf("ledger holds postings for %d charges (%v), want %d; outcomes %v, DLQ %v", len(got), got, len(ids), p.snapshot(), p.dlq(t))
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Fatalf("%s posted %d times, want once (ledger %v); outcomes %v, DLQ %v", id, got[id], got, p.snapshot(), p.dlq(t))
		}
	}
}

func fee(id, account string, minor int64) charge.Charge {
	return charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: minor, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
}

func fiveCopies(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{})
	p.send(t, fee("CHG-5X", "001234567890", 2500), 5)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	p.drained(t)
	stop()
	p.wantPostedOnce(t, "CHG-5X")
	p.wantRecord(t, "CHG-5X", driver.StateDone, charge.Debited)
	if p.count(charge.Processed) != 1 || p.count(charge.DuplicateDone) != 4 || len(p.notes.Sent()) != 1 {
		t.Fatalf("outcomes %v, %d notifications; want 1 processed, 4 duplicates, 1 notification", p.snapshot(), len(p.notes.Sent()))
	}
	if d := p.dlq(t); len(d) != 0 {
		t.Fatalf("DLQ %v, want empty", d)
	}
}

func inFlightDuplicate(t *testing.T, h Harness) {
	// The debit takes longer than a duplicate needs to arrive.
	p := newPipeline(t, h, config{faults: corebanksim.Faults{Latency: 700 * time.Millisecond}, lease: 2 * time.Second})
	p.send(t, fee("CHG-SLOW", "001234567890", 2500), 2)
	stop := p.run(t, consumer.Options{Concurrency: 2})
	p.drained(t)
	stop()
	// At least one copy dropped as done: on a loaded machine the emulator's
	// visibility timeout may hand a copy out once more (at-least-once),
	// which is another duplicate, never another debit (checked below).
	if p.count(charge.DuplicateInProgress) < 1 || p.count(charge.DuplicateDone) < 1 || p.count(charge.Processed) != 1 {
		t.Fatalf("outcomes %v: want the copy left while the first debited, then dropped as done", p.snapshot())
	}
	p.wantPostedOnce(t, "CHG-SLOW")
	if n := p.ledger.Calls("CHG-SLOW"); n != 1 {
		t.Fatalf("%d debit requests, want 1: the duplicate must not reach the bank", n)
	}
}

// A worker claimed the charge and died without debiting: its lease runs
// out, the next delivery reclaims it (attempt 2) and debits once.
func expiredLease(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{lease: time.Second})
	c := fee("CHG-DEAD", "001234567890", 2500)
	if _, err := p.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil)); err != nil {
		t.Fatal(err)
	}
	p.send(t, c, 1)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	p.drained(t)
	stop()
	p.wantPostedOnce(t, c.ID)
	if r := p.wantRecord(t, c.ID, driver.StateDone, charge.Debited); r.Attempt != 2 {
		t.Fatalf("attempt %d, want 2 (the dead worker's claim, then ours)", r.Attempt)
	}
	if p.count(charge.DuplicateInProgress) < 1 {
		t.Fatalf("outcomes %v: the live lease of the dead worker must hold the message back first", p.snapshot())
	}
}

// A worker claimed, debited and died before recording DONE: the money
// moved, the record says IN_PROGRESS. The reclaim repeats the request with
// the same idempotency key, the bank answers with the first posting, and
// the record becomes DONE: one posting.
func crashAfterDebit(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{lease: time.Second})
	c := fee("CHG-CRASH", "001234567890", 2500)
	if _, err := p.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil)); err != nil {
		t.Fatal(err)
	}
	first, err := p.ledger.Debit(t.Context(), c.DebitRequest())
	if err != nil {
		t.Fatal(err)
	}
	p.send(t, c, 2)
	stop := p.run(t, consumer.Options{Concurrency: 2})
	p.drained(t)
	stop()
	p.wantPostingsOnce(t, c.ID)
	// One request after the crash (the reclaim's), absorbed by the key;
	// the copy is dropped on the DONE record.
	if dup := p.ledger.DuplicateRequests(); dup[c.ID] != 1 || len(dup) != 1 {
		t.Fatalf("requests after the first posting %v, want exactly the reclaim's one", dup)
	}
	if r := p.wantRecord(t, c.ID, driver.StateDone, charge.Debited); r.Attempt != 2 {
		t.Fatalf("record %+v", r)
	}
	if e := p.ledger.Entries(); len(e) != 1 || e[0].Reference != first.Reference {
		t.Fatalf("ledger %+v, want only the first posting %s", e, first.Reference)
	}
}

func decline(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{faults: corebanksim.Faults{DeclineAccounts: map[string]string{"009999999999": "ACCOUNT_CLOSED"}}})
	p.send(t, fee("CHG-CLOSED", "009999999999", 2500), 2)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	p.drained(t)
	stop()
	if n := len(p.ledger.Entries()); n != 0 {
		t.Fatalf("ledger has %d entries, want none", n)
	}
	p.wantRecord(t, "CHG-CLOSED", driver.StateFailed, charge.Failed)
	if n := p.ledger.Calls("CHG-CLOSED"); n != 1 {
		t.Fatalf("%d debit requests, want 1: the copy must be dropped on the FAILED record", n)
	}
	if d := p.dlq(t); d["debit_failed"] != 1 || d["duplicate_failed"] != 1 || len(d) != 2 {
		t.Fatalf("DLQ %v, want one debit_failed and one duplicate_failed", d)
	}
}

func malformed(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{})
	p.sendRaw(t, `{"chargeId":"CHG-BAD","accountId":"001234567890","amount":{"minor":25.5,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`, 1)
	p.sendRaw(t, `not json at all`, 1)
	stop := p.run(t, consumer.Options{})
	p.drained(t)
	stop()
	if n := p.ledger.Calls("CHG-BAD"); n != 0 || len(p.ledger.Entries()) != 0 {
		t.Fatalf("a malformed message reached the bank (%d requests)", n)
	}
	if _, err := p.guard.Get(t.Context(), "CHG-BAD"); err == nil {
		t.Fatal("a malformed message left an idempotency record")
	}
	if d := p.dlq(t); d["invalid"] != 2 || len(d) != 1 {
		t.Fatalf("DLQ %v, want two invalid", d)
	}
}

func conflict(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{})
	p.send(t, fee("CHG-REUSE", "001234567890", 2500), 1)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	p.drained(t)
	p.send(t, fee("CHG-REUSE", "001234567890", 999999), 1)
	p.drained(t)
	stop()
	if e := p.ledger.Entries(); len(e) != 1 || e[0].AmountMinor != 2500 {
		t.Fatalf("ledger %+v, want the first amount only", e)
	}
	p.wantRecord(t, "CHG-REUSE", driver.StateDone, charge.Debited)
	if d := p.dlq(t); d["conflict"] != 1 || len(d) != 1 {
		t.Fatalf("DLQ %v, want one conflict", d)
	}
	// A redrive holds the conflict back: a person decides.
	rep, err := p.b.Queue.Redrive(t.Context(), queue.RedriveOptions{HoldBack: chargehandler.HoldBack})
	if err != nil || rep.Moved != 0 || rep.HeldBack != 1 {
		t.Fatalf("redrive %+v, %v; want the conflict held back", rep, err)
	}
}

func transient(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{faults: corebanksim.Faults{TransientRate: 0.3, TransientAfterPostRate: 0.2}, lease: time.Second})
	const n = 30
	var ids []string
	for i := range n {
		c := fee(fmt.Sprintf("CHG-T%03d", i), "001234567890", int64(100+i))
		ids = append(ids, c.ID)
		p.send(t, c, 1+i%3)
	}
	stop := p.run(t, consumer.Options{Concurrency: 8})
	p.drained(t)
	stop()
	p.wantPostedOnce(t, ids...)
	for _, id := range ids {
		p.wantRecord(t, id, driver.StateDone, charge.Debited)
	}
	if p.count(charge.RetryLater) == 0 {
		t.Fatal("no transient failure was injected; the scenario proves nothing")
	}
	if d := p.dlq(t); len(d) != 0 {
		t.Fatalf("DLQ %v, want empty: transient failures are never final", d)
	}
}

func shutdownRestart(t *testing.T, h Harness) {
	p := newPipeline(t, h, config{faults: corebanksim.Faults{Latency: 50 * time.Millisecond}, lease: time.Second, visibility: time.Second})
	const n = 40
	var ids []string
	for i := range n {
		c := fee(fmt.Sprintf("CHG-SD%03d", i), "001234567890", 2500)
		ids = append(ids, c.ID)
		p.send(t, c, 1+i%2)
	}
	opts := consumer.Options{Concurrency: 4, VisibilityTimeout: time.Second, ShutdownTimeout: 10 * time.Millisecond}
	stop := p.run(t, opts)
	// 40 charges at 50 ms each through 4 slots take at least 500 ms.
	deadline := time.Now().Add(30 * time.Second)
	for len(p.ledger.PostingsByKey()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop() // handlers in flight are cut off by the shutdown deadline
	if posted := len(p.ledger.PostingsByKey()); posted == n || posted == 0 {
		t.Fatalf("%d of %d posted before the shutdown: the scenario proves nothing", posted, n)
	}
	stop2 := p.run(t, consumer.Options{Concurrency: 4, VisibilityTimeout: time.Second})
	p.drained(t)
	stop2()
	p.wantPostedOnce(t, ids...)
}

// poison: 200 charges (a third sent twice) among 100 messages over the
// size limit (where the queue can hold them), 40 that are not events and
// 10 that reuse a charge id with another amount, consumed by four
// receives at once (on PostgreSQL, on a pool of four connections): every
// charge is posted once and DONE, and every poison message reaches the
// DLQ with its reason.
func poison(t *testing.T, h Harness) {
	good, big, conflicts := 200, 100, 10
	cfg := config{}
	if h.Emulated {
		good, conflicts, cfg = 40, 4, config{lease: 30 * time.Second, visibility: 30 * time.Second}
	}
	invalid := 2 * ((good + 9) / 10) // two after every tenth charge
	p := newPipeline(t, h, cfg)
	if p.b.WriteTooLarge != nil {
		// Oldest first: every receive of the four meets them at once.
		p.b.WriteTooLarge(t, big)
	}
	var ids []string
	for i := range good {
		c := fee(fmt.Sprintf("CHG-P%03d", i), "001234567890", int64(100+i))
		ids = append(ids, c.ID)
		p.send(t, c, 1+i%3/2)
		if i%10 == 0 {
			p.sendRaw(t, `not an event`, 1)
			p.sendRaw(t, `{"chargeId":"CHG-BAD","amount":{"minor":1.5}}`, 1)
		}
	}
	stop := p.run(t, consumer.Options{Concurrency: 64, Receivers: 4}) // as serve runs: four receives of ten at once
	p.drained(t)
	for i := range conflicts { // the same ids, another amount, once they are DONE
		p.send(t, fee(ids[i], "001234567890", 999999), 1)
	}
	p.drained(t)
	stop()
	p.wantPostedOnce(t, ids...)
	for _, id := range ids {
		p.wantRecord(t, id, driver.StateDone, charge.Debited)
	}
	want := map[queue.Code]int{"invalid": invalid, "conflict": conflicts}
	if p.b.WriteTooLarge != nil {
		want[queue.CodeTooLarge] = big
	}
	if d := p.dlq(t); !maps.Equal(d, want) {
		t.Fatalf("DLQ %v, want %v", d, want)
	}
}
