package chargehandler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/corebank"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/notify"
	"github.com/finedge/idempotent-consumer/queue"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type pipeline struct {
	q, dlq *memqueue.Queue
	store  *memstore.Store
	guard  *idempotency.Guard
	ledger *corebank.Ledger
	notes  *notify.Recorder
	h      *chargehandler.Handler

	mu       sync.Mutex
	outcomes map[charge.Outcome]int
}

type config struct {
	lease, visibility time.Duration
	faults            corebank.Faults
	concurrency       int
}

func newPipeline(t *testing.T, cfg config) *pipeline {
	t.Helper()
	if cfg.lease == 0 {
		cfg.lease = 5 * time.Second
	}
	if cfg.visibility == 0 {
		cfg.visibility = 5 * time.Second
	}
	p := &pipeline{
		store: memstore.New(), ledger: corebank.NewLedger(cfg.faults), notes: notify.NewRecorder(0, nil),
		outcomes: map[charge.Outcome]int{},
	}
	p.dlq = memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	p.q = memqueue.New(memqueue.Options{VisibilityTimeout: cfg.visibility, WaitTime: 20 * time.Millisecond, DLQ: p.dlq, MaxReceiveCount: 50})
	var err error
	p.guard, err = idempotency.NewGuard(p.store, idempotency.Options{Lease: cfg.lease, SkewMargin: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: p.guard, Debiter: p.ledger, Notifier: p.notes, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p.h = chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: quiet, InProgressMargin: 10 * time.Millisecond,
		OnResult: func(_ queue.Message, _ charge.Charge, r charge.Result) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.outcomes[r.Outcome]++
		}})
	return p
}

func (p *pipeline) run(t *testing.T, opts consumer.Options) (stop func()) {
	t.Helper()
	opts.Logger = quiet
	if opts.Backoff == nil {
		opts.Backoff = func(int) time.Duration { return 20 * time.Millisecond }
	}
	rt, err := consumer.New(p.q, p.h, opts)
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

func (p *pipeline) sendRaw(t *testing.T, body string) {
	t.Helper()
	if _, err := p.q.Send(t.Context(), []byte(body), nil); err != nil {
		t.Fatal(err)
	}
}

func (p *pipeline) send(t *testing.T, c charge.Charge, copies int) {
	t.Helper()
	b, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	for range copies {
		p.sendRaw(t, string(b))
	}
}

func waitDrained(t *testing.T, p *pipeline) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for p.q.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("queue not drained: depth %d, outcomes %v", p.q.Len(), p.outcomes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fee(id, account string, minor int64) charge.Charge {
	return charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: minor, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
}

func (p *pipeline) wantRecord(t *testing.T, id string, state idempotency.State, status charge.Status) {
	t.Helper()
	r, err := p.guard.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	if r.State != state || r.Status != string(status) {
		t.Fatalf("record %s = %s/%s, want %s/%s", id, r.State, r.Status, state, status)
	}
}

func TestSameChargeFiveTimesDebitsOnce(t *testing.T) {
	p := newPipeline(t, config{})
	p.send(t, fee("CHG-5X", "001234567890", 2500), 5)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	waitDrained(t, p)
	stop()
	if got := p.ledger.PostingsByKey(); len(got) != 1 || got["CHG-5X"] != 1 {
		t.Fatalf("ledger = %v, want one posting for CHG-5X", got)
	}
	p.wantRecord(t, "CHG-5X", idempotency.StateDone, charge.Debited)
	if p.count(charge.Processed) != 1 || p.count(charge.DuplicateDone) != 4 {
		t.Fatalf("outcomes = %v", p.outcomes)
	}
	if len(p.notes.Sent()) != 1 {
		t.Fatalf("notifications = %d, want 1", len(p.notes.Sent()))
	}
}

func TestRedeliveryDuringASlowDebitIsNotAckedThenDroppedAsDone(t *testing.T) {
	// The debit takes longer than the time a duplicate needs to arrive.
	p := newPipeline(t, config{faults: corebank.Faults{Latency: 300 * time.Millisecond}, lease: time.Second})
	p.send(t, fee("CHG-SLOW", "001234567890", 2500), 2)
	stop := p.run(t, consumer.Options{Concurrency: 2})
	waitDrained(t, p)
	stop()
	if p.count(charge.DuplicateInProgress) < 1 || p.count(charge.DuplicateDone) != 1 || p.count(charge.Processed) != 1 {
		t.Fatalf("outcomes = %v, want the copy first left in flight, then dropped as done", p.outcomes)
	}
	if p.ledger.Calls("CHG-SLOW") != 1 {
		t.Fatalf("debit calls = %d, want 1", p.ledger.Calls("CHG-SLOW"))
	}
}

func TestMalformedAndDeclinedGoToTheDLQWithAReasonAndAreNeverDebited(t *testing.T) {
	p := newPipeline(t, config{faults: corebank.Faults{DeclineAccounts: map[string]string{"009999999999": "ACCOUNT_CLOSED"}}})
	p.sendRaw(t, `{"chargeId":"CHG-BAD","accountId":"001234567890","amount":{"minor":25.5,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`)
	p.sendRaw(t, `not json at all`)
	p.send(t, fee("CHG-CLOSED", "009999999999", 2500), 1)
	stop := p.run(t, consumer.Options{})
	waitDrained(t, p)
	stop()
	if n := len(p.ledger.Entries()); n != 0 {
		t.Fatalf("ledger has %d entries, want none", n)
	}
	reasons := map[string]bool{}
	for _, m := range p.dlq.Messages() {
		reasons[queue.ReasonFromAttributes(m.Attributes).String()] = true
	}
	var want = []string{"invalid: invalid charge event: amount.minor", "invalid: invalid charge event: not a ChargeDueEvent", "debit_failed: debit declined: ACCOUNT_CLOSED"}
	for _, prefix := range want {
		found := false
		for r := range reasons {
			found = found || strings.HasPrefix(r, prefix)
		}
		if !found {
			t.Errorf("no DLQ reason starting %q in %v", prefix, reasons)
		}
	}
	if len(reasons) != 3 {
		t.Fatalf("DLQ reasons = %v, want 3", reasons)
	}
	p.wantRecord(t, "CHG-CLOSED", idempotency.StateFailed, charge.Failed)
	if _, err := p.guard.Get(t.Context(), "CHG-BAD"); err == nil {
		t.Fatal("a malformed message left an idempotency record")
	}
}

func TestConflictingPayloadIsDeadLetteredNotDebited(t *testing.T) {
	p := newPipeline(t, config{})
	p.send(t, fee("CHG-REUSE", "001234567890", 2500), 1)
	stop := p.run(t, consumer.Options{Concurrency: 1})
	waitDrained(t, p)
	p.send(t, fee("CHG-REUSE", "001234567890", 999999), 1)
	waitDrained(t, p)
	stop()
	if e := p.ledger.Entries(); len(e) != 1 || e[0].AmountMinor != 2500 {
		t.Fatalf("ledger = %+v, want the first amount only", e)
	}
	d := p.dlq.Messages()
	if len(d) != 1 || queue.ReasonFromAttributes(d[0].Attributes).Code != "conflict" {
		t.Fatalf("DLQ = %+v", d)
	}
}

func TestTransientFailuresAndLostResponsesStillDebitEachChargeOnce(t *testing.T) {
	p := newPipeline(t, config{faults: corebank.Faults{TransientRate: 0.3, TransientAfterPostRate: 0.2}, lease: 500 * time.Millisecond})
	const n = 40
	for i := range n {
		p.send(t, fee(fmt.Sprintf("CHG-%03d", i), "001234567890", int64(100+i)), 1+i%3)
	}
	stop := p.run(t, consumer.Options{Concurrency: 8})
	waitDrained(t, p)
	stop()
	got := p.ledger.PostingsByKey()
	if len(got) != n {
		t.Fatalf("%d charges posted, want %d", len(got), n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s posted %d times", k, c)
		}
		p.wantRecord(t, k, idempotency.StateDone, charge.Debited)
	}
	if p.count(charge.RetryLater) == 0 {
		t.Fatal("no transient failure was injected; the test proves nothing")
	}
}

func TestShutdownMidStreamThenRestartProcessesEveryChargeOnce(t *testing.T) {
	p := newPipeline(t, config{faults: corebank.Faults{Latency: 20 * time.Millisecond}, lease: 300 * time.Millisecond, visibility: 300 * time.Millisecond})
	const n = 60
	for i := range n {
		p.send(t, fee(fmt.Sprintf("CHG-SD-%03d", i), "001234567890", 2500), 1+i%2)
	}
	stop := p.run(t, consumer.Options{Concurrency: 10, VisibilityTimeout: 300 * time.Millisecond, ShutdownTimeout: 10 * time.Millisecond})
	time.Sleep(80 * time.Millisecond)
	stop() // some handlers are cut off by the shutdown deadline
	// 60 charges at 20 ms each through 10 slots take at least 120 ms: the
	// shutdown at 80 ms must have left work for the restart.
	if posted := len(p.ledger.PostingsByKey()); posted == n || posted == 0 {
		t.Fatalf("%d of %d posted before the shutdown: the test proves nothing", posted, n)
	}
	stop2 := p.run(t, consumer.Options{Concurrency: 10, VisibilityTimeout: 300 * time.Millisecond})
	waitDrained(t, p)
	stop2()
	got := p.ledger.PostingsByKey()
	if len(got) != n {
		t.Fatalf("%d charges posted, want %d", len(got), n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s posted %d times", k, c)
		}
	}
}
