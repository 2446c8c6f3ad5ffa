package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

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
