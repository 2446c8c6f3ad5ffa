package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
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
