package scenariotest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	wiring "github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// downStore fails every call with ErrUnavailable while down is set: a
// store that cannot be reached.
type downStore struct {
	driver.Store
	down atomic.Bool
}

func (s *downStore) err(op string) error {
	if s.down.Load() {
		return driver.Unavailable(op, fmt.Errorf("injected outage"))
	}
	return nil
}

func (s *downStore) Claim(ctx context.Context, r driver.ClaimRequest) (driver.ClaimResult, error) {
	if err := s.err("claim"); err != nil {
		return driver.ClaimResult{}, err
	}
	return s.Store.Claim(ctx, r)
}

func (s *downStore) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	if err := s.err("get"); err != nil {
		return driver.Record{}, err
	}
	return s.Store.Get(ctx, key, now)
}

func (s *downStore) Finish(ctx context.Context, f driver.FinishRequest) error {
	if err := s.err("finish"); err != nil {
		return err
	}
	return s.Store.Finish(ctx, f)
}

func (s *downStore) Extend(ctx context.Context, req driver.ExtendRequest) error {
	if err := s.err("extend"); err != nil {
		return err
	}
	return s.Store.Extend(ctx, req)
}

// Receipt is one handling of a message: when it began (or any time
// after its receive; a later time only makes the check stricter), which,
// and its receive count then.
type Receipt struct {
	At    time.Time
	ID    string
	Count int
}

// Growth is a message whose receive count grew by more than one in a
// window: From is the highest count handled before it, To the highest
// within it.
type Growth struct {
	ID       string
	From, To int
}

func (g Growth) String() string {
	return fmt.Sprintf("message %s: receive count %d → %d, want at most one more", g.ID, g.From, g.To)
}

// GrewDuring checks the outage invariant: it returns each message whose
// receive count grew by more than one between from and to (the highest
// count handled before from is the starting point), and how many messages
// were handled in the window. A receipt's At must not be earlier than the
// receive it counts: a handling that began before from says its receive
// was before the window, whenever its result was written.
func GrewDuring(rs []Receipt, from, to time.Time) (violations []Growth, handled int) {
	before, during := map[string]int{}, map[string]int{}
	for _, r := range rs {
		switch {
		case r.At.Before(from):
			before[r.ID] = max(before[r.ID], r.Count)
		case r.At.Before(to):
			during[r.ID] = max(during[r.ID], r.Count)
		}
	}
	for id, c := range during {
		if c-before[id] > 1 {
			violations = append(violations, Growth{ID: id, From: before[id], To: c})
		}
	}
	return violations, len(during)
}

// outages runs the production wiring (pipeline.New: the bank's circuit
// and the store's) through a bank outage whose health check keeps
// answering 200, then a store outage, each four times longer than the
// queue's redrive budget at these settings: nothing is dead-lettered,
// every charge is posted once and DONE, and no message's receive count
// grows by more than one during either outage.
func outages(t *testing.T, h Harness) {
	const n = 40
	b := h.Open(t, 2*time.Second)
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 5 * time.Millisecond})
	srv := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(srv.Close)
	cfg := wiring.Config{Concurrency: 4, Visibility: 2 * time.Second, Lease: 2 * time.Second, Retention: idempotency.DefaultRetention,
		Skew: 50 * time.Millisecond, ShutdownTimeout: 5 * time.Second, CorebankURL: srv.URL, CorebankTimeout: time.Second,
		Declines: "422:DECLINED", Enquiry: true, HealthPath: "/healthz", CircuitAfter: 3, StoreAfter: 3,
		ProbeEvery: 100 * time.Millisecond, ProbeMax: 400 * time.Millisecond, NotifyTimeout: time.Second}
	bank, err := wiring.NewBank(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	store := &downStore{Store: b.Store}
	var mu sync.Mutex
	var seen []Receipt
	pl, err := wiring.New(wiring.Ports{Source: b.Queue, Store: store, Bank: bank, Notifier: notifysim.NewRecorder(0, nil)}, cfg,
		wiring.Options{Logger: quiet, OnDecision: func(m queue.Message, _ consumer.Decision, took time.Duration) {
			// When the handling began: a receive just before an outage,
			// answered within it, is not a receive within it.
			at := time.Now().Add(-took)
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, Receipt{at, m.ID, m.ReceiveCount})
		}})
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{b: b, ledger: ledger}
	var ids []string
	for i := range n {
		c := fee(fmt.Sprintf("CHG-OUT-%03d", i), "001234567890", int64(100+i))
		ids = append(ids, c.ID)
		p.send(t, c, 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = pl.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// The bank: 503 on every call for 3 s while /healthz says OK. Without
	// the gates and the parking, a retried message returns after 1 s, then
	// 2 s (the runtime's default backoff) and is received again within
	// the window.
	bankFrom := time.Now()
	ledger.SetFaults(corebanksim.Faults{Latency: 5 * time.Millisecond, OutageStatus: 503, OutageUntil: bankFrom.Add(3 * time.Second), OutageHealthy: true})
	time.Sleep(3 * time.Second)
	bankTo := time.Now()
	// The store: unreachable for 3 s while the queue keeps delivering.
	for len(ledger.PostingsByKey()) < n/4 {
		time.Sleep(10 * time.Millisecond)
	}
	storeFrom := time.Now()
	store.down.Store(true)
	time.Sleep(3 * time.Second)
	store.down.Store(false)
	storeTo := time.Now()
	p.drained(t)
	cancel()
	<-done

	p.wantPostedOnce(t, ids...)
	for _, id := range ids {
		if r, err := b.Store.Get(t.Context(), id, time.Now()); err != nil || r.State != driver.StateDone {
			t.Fatalf("%s: %+v %v, want DONE", id, r.State, err)
		}
	}
	if d := p.dlq(t); len(d) != 0 {
		t.Fatalf("DLQ %v, want empty: an outage dead-lettered work", d)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, w := range []struct {
		name     string
		from, to time.Time
	}{{"bank outage", bankFrom, bankTo}, {"store outage", storeFrom, storeTo}} {
		violations, handled := GrewDuring(seen, w.from, w.to)
		if handled == 0 {
			t.Fatalf("nothing was handled during the %s: the scenario proves nothing", w.name)
		}
		for _, v := range violations {
			t.Errorf("%s during the %s", v, w.name)
		}
	}
	if s := bank.Breaker.Status(); s.Opens == 0 {
		t.Fatal("the bank's circuit never opened")
	}
	if s := pl.StoreGate.Status(); s.Opens == 0 {
		t.Fatal("the store's circuit never opened")
	}
}
