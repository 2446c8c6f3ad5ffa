package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// fakeBound is a message's binding to the claim its receive made: Finish
// answers what finish says (blocking until release is closed, when set).
type fakeBound struct {
	driver.Bound
	finish  error
	release chan struct{}
	claimed bool
}

// storeBreaker is the idempotency store's circuit breaker with o's
// threshold and probe intervals, logging nowhere.
func storeBreaker(t *testing.T, o circuit.Options) *circuit.Breaker {
	t.Helper()
	o.Name, o.Logger = "idempotency store", slog.New(slog.NewTextHandler(io.Discard, nil))
	br, err := circuit.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return br
}

// halfOpen opens br by one outage of the store and waits, its probes
// running, until it is half-open.
func halfOpen(t *testing.T, br *circuit.Breaker) {
	t.Helper()
	_ = gatedBound{Bound: &fakeBound{finish: driver.Unavailable("finish", errors.New("down"))}, br: br}.Finish(t.Context(), driver.FinishRequest{})
	go func() { _ = br.Run(t.Context()) }()
	waitStoreState(t, br, circuit.HalfOpen)
}

func (b *fakeBound) Claimed() (driver.ClaimRequest, driver.ClaimResult, bool) {
	if b.claimed {
		return driver.ClaimRequest{}, driver.ClaimResult{}, false
	}
	b.claimed = true
	return driver.ClaimRequest{Key: "K"}, driver.ClaimResult{Record: driver.Record{Key: "K", State: driver.StateDone}}, true
}

func (b *fakeBound) Finish(ctx context.Context, _ driver.FinishRequest) error {
	if b.release != nil {
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.finish
}

func waitStoreState(t *testing.T, br *circuit.Breaker, want circuit.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for br.Status().State != want {
		if time.Now().After(deadline) {
			t.Fatalf("store circuit %v, want %v", br.Status().State, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// With claims made in the receive's transaction, a half-open store circuit's
// trial message that is a duplicate (its claim at receive already answered)
// makes no store call: it closes nothing and holds no trial, so the next
// message is the trial. A result write started before the circuit opened
// and answering meanwhile moves nothing either; only the next message's own
// write closes the circuit.
func TestACoLocatedDuplicateTrialClosesNothingAndHoldsNoTrial(t *testing.T) {
	for _, stale := range []error{nil, driver.Unavailable("finish", errors.New("connection reset"))} {
		t.Run(map[bool]string{true: "stale success", false: "stale failure"}[stale == nil], func(t *testing.T) {
			br := storeBreaker(t, circuit.Options{Threshold: 3, ProbeInterval: time.Millisecond, MaxProbeInterval: time.Millisecond})
			ctx := t.Context()
			// A slow result write of the closed era: it answers only once
			// the circuit is half-open.
			slow := &fakeBound{finish: stale, release: make(chan struct{})}
			slowDone := make(chan error, 1)
			go func() { slowDone <- gatedBound{Bound: slow, br: br}.Finish(ctx, driver.FinishRequest{Key: "OLD"}) }()
			time.Sleep(10 * time.Millisecond) // under way
			for range 3 {                     // the store goes away
				_ = gatedBound{Bound: &fakeBound{finish: driver.Unavailable("finish", errors.New("down"))}, br: br}.Finish(ctx, driver.FinishRequest{})
			}
			if s := br.Status(); s.State != circuit.Open {
				t.Fatalf("store circuit %v after 3 unreachable writes, want open", s.State)
			}
			opens := br.Status().Opens
			go func() { _ = br.Run(ctx) }()
			waitStoreState(t, br, circuit.HalfOpen)

			// The runtime hands one message over: a duplicate. Its claim
			// answered at receive; it writes no result.
			if trial, err := br.Wait(ctx); err != nil || !trial {
				t.Fatalf("Wait while half-open: %v %v, want a trial", trial, err)
			}
			dup := gatedBound{Bound: &fakeBound{}, br: br}
			if _, res, ok := dup.Claimed(); !ok || res.Record.State != driver.StateDone {
				t.Fatal("the duplicate's claim was not handed over")
			}
			// The closed era's write answers now.
			close(slow.release)
			if err := <-slowDone; !errors.Is(err, stale) {
				t.Fatalf("the slow write: %v", err)
			}
			if s := br.Status(); s.State != circuit.HalfOpen || s.TrialOut || s.Opens != opens {
				t.Fatalf("after a duplicate trial and a stale write: %v, trial out %v, opened %d times (before %d); want half_open, no trial out",
					s.State, s.TrialOut, s.Opens, opens)
			}
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if trial, err := br.Wait(wctx); err != nil || !trial {
				t.Fatalf("Wait after the duplicate: %v %v, want the next message to be the trial (the gate held)", trial, err)
			}
			// The next message writes its result: a real success.
			if err := (gatedBound{Bound: &fakeBound{}, br: br}).Finish(ctx, driver.FinishRequest{Key: "NEW"}); err != nil {
				t.Fatal(err)
			}
			if s := br.Status(); s.State != circuit.Closed {
				t.Fatalf("after the trial's write succeeded: %v, want closed", s.State)
			}
		})
	}
}

// A store call whose caller gave up says nothing about the store: as the
// trial it is given back, and the next call is the trial.
func TestAnAbandonedStoreTrialIsGivenBack(t *testing.T) {
	br := storeBreaker(t, circuit.Options{Threshold: 1, ProbeInterval: time.Millisecond, MaxProbeInterval: time.Millisecond})
	halfOpen(t, br)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := (gatedBound{Bound: &fakeBound{release: make(chan struct{})}, br: br}).Finish(ctx, driver.FinishRequest{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled write: %v", err)
	}
	if s := br.Status(); s.State != circuit.HalfOpen || s.TrialOut {
		t.Fatalf("after an abandoned trial: %v, trial out %v; want half_open with the trial given back", s.State, s.TrialOut)
	}
	if err := (gatedBound{Bound: &fakeBound{}, br: br}).Finish(t.Context(), driver.FinishRequest{}); err != nil {
		t.Fatal(err)
	}
	if s := br.Status(); s.State != circuit.Closed {
		t.Fatalf("after the next write succeeded: %v, want closed", s.State)
	}
}

// ATTACK (surface 5): "a call whose caller gave up gives the trial back"
// holds only for the test's fake, which returns ctx.Err() bare. Every real
// store wraps whatever its driver returns, the caller's own cancellation
// included, in driver.Unavailable (postgres/store.go, sqlite/store.go, and
// the PostgreSQL bound's Finish wraps the settler's ctx.Err() the same
// way), and call() tests ErrUnavailable first: a half-open trial whose
// caller gave up (shutdown, a handler that stopped waiting) is recorded
// as the store failing — the circuit reopens with its probe interval
// doubled, and receiving stays paused although the store is healthy. The
// Abandon branch is never reached with a real store.
func TestReview35ACancelledTrialOnARealStoreReopensTheCircuit(t *testing.T) {
	br := storeBreaker(t, circuit.Options{Threshold: 1, ProbeInterval: time.Millisecond, MaxProbeInterval: time.Hour})
	// One real outage opens it; the interval passes; half-open.
	_ = gatedBound{Bound: &fakeBound{finish: driver.Unavailable("finish", errors.New("down"))}, br: br}.Finish(t.Context(), driver.FinishRequest{})
	runCtx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() { _ = br.Run(runCtx) }()
	waitStoreState(t, br, circuit.HalfOpen)
	stop() // no more probes: only the trial's outcome moves it now
	opens := br.Status().Opens

	store := gatedStore{Store: postgres.NewStore(pgtest.Open(t)), br: br}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the caller gave up before the store answered
	now := time.Now()
	_, err := store.Claim(ctx, driver.ClaimRequest{Key: "CHG-A35-TRIAL", Token: "t1", Fingerprint: "fp", Now: now,
		LeaseExpiredBy: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("the cancelled trial: %v (want context.Canceled wrapped as ErrUnavailable, as the store does)", err)
	}
	if s := br.Status(); s.State != circuit.HalfOpen || s.TrialOut || s.Opens != opens {
		t.Fatalf("after a trial whose caller gave up: %v (trial out %v, opened %d→%d times, next trial in %s); want half_open with the trial given back",
			s.State, s.TrialOut, opens, s.Opens, s.NextProbeIn)
	}
}

// panickyStore is a store whose Claim panics (a driver bug, a record it
// cannot decode): the consumer recovers handler panics (safeHandle) and
// goes on, so the process keeps running.
type panickyStore struct{ driver.Store }

func (panickyStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimResult, error) {
	panic("attack35: the driver panicked")
}

// ATTACK (surface 5): a trial that never reports. call() takes the
// half-open circuit's one trial ticket and reports it only on return; a
// store call that panics never returns, so neither Record nor Abandon
// runs. The consumer recovers the panic (the message is retried), but the
// circuit stays half-open with its trial out for good: Run only acts when
// the circuit is open, nothing else clears the trial, and the store gate's
// Wait blocks every receiver forever. One panicking message at the wrong
// moment stops the whole consumer until a restart (nothing is received,
// in-flight claims lapse and are re-posted by other processes).
func TestReview35APanickingTrialHoldsTheHalfOpenGateForever(t *testing.T) {
	br := storeBreaker(t, circuit.Options{Threshold: 1, ProbeInterval: time.Millisecond, MaxProbeInterval: time.Millisecond})
	halfOpen(t, br)

	func() {
		defer func() { _ = recover() }() // as consumer.safeHandle does
		_, _ = gatedStore{Store: panickyStore{}, br: br}.Claim(t.Context(), driver.ClaimRequest{Key: "CHG-A35-PANIC"})
	}()
	if s := br.Status(); s.State == circuit.HalfOpen && s.TrialOut {
		t.Fatalf("after the trial's store call panicked: %v with the trial out, and nothing will ever give it back (receivers wait on the gate forever)", s.State)
	}
}

// hangingBound is a store that does not answer (a network black hole, a
// lock wait): its Finish returns only when the call's deadline passes, and
// wraps that as unavailable, as every real store does.
type hangingBound struct{ driver.Bound }

func (hangingBound) Finish(ctx context.Context, _ driver.FinishRequest) error {
	<-ctx.Done()
	return driver.Unavailable("finish", ctx.Err())
}

// REVIEW 35b: call() now abandons every failed call whose ctx has ended
// before it tests ErrUnavailable. But a store call's ctx ends by itself on
// a timeout: idempotency's record() runs each Finish under
// context.WithTimeout(FinishTimeout) (idempotency/do.go:202). A store
// that hangs fails every call by that deadline, and every such failure is
// abandoned: the store circuit never opens, receiving is never paused,
// and the store alert never fires, however long the store hangs.
func TestReview35bAHangingStoreNeverOpensTheCircuit(t *testing.T) {
	br := storeBreaker(t, circuit.Options{Threshold: 3})
	g := gatedBound{Bound: hangingBound{}, br: br}
	for range 10 {
		// As record() does: a bounded attempt on a ctx the caller's
		// cancellation does not reach.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Millisecond)
		err := g.Finish(fctx, driver.FinishRequest{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("finish: %v", err)
		}
	}
	if s := br.Status(); s.State != circuit.Open {
		t.Fatalf("after 10 timed-out store calls (threshold 3): circuit %v, %d failures counted; want open", s.State, s.Failures)
	}
}
