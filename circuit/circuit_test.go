package circuit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var errBank = errors.New("HTTP 503")

// record reports one call's result to b: allowed, or made regardless while
// the circuit is open (a call that must be tried, as a result's write).
func record(b *circuit.Breaker, err error) {
	tk, _ := b.Allow()
	b.Record(tk, err)
}

// allowed is Allow's error, for a call that is then not made.
func allowed(b *circuit.Breaker) error {
	tk, err := b.Allow()
	b.Abandon(tk)
	return err
}

func newBreaker(t *testing.T, probe func(context.Context) error) *circuit.Breaker {
	t.Helper()
	b, err := circuit.New(circuit.Options{Name: "bank", Threshold: 3, ProbeInterval: 5 * time.Millisecond,
		MaxProbeInterval: 20 * time.Millisecond, Probe: probe, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOnlyConsecutiveFailuresOpen(t *testing.T) {
	b := newBreaker(t, nil)
	for range 10 { // failures broken up by successes never open it
		record(b, errBank)
		record(b, errBank)
		record(b, nil)
	}
	if s := b.Status(); s.State != circuit.Closed || allowed(b) != nil {
		t.Fatalf("state %v after interleaved failures, want closed", s.State)
	}
	record(b, errBank)
	record(b, errBank)
	record(b, errBank)
	if s := b.Status(); s.State != circuit.Open || s.LastError != errBank.Error() || s.OpenedAt.IsZero() {
		t.Fatalf("status %+v after 3 consecutive failures, want open", s)
	}
	if !errors.Is(allowed(b), circuit.ErrOpen) {
		t.Fatal("Allow let a call through while open")
	}
}

func TestWaitBlocksWhileOpenAndProbesResume(t *testing.T) {
	var healthy atomic.Bool
	var probes atomic.Int64
	b := newBreaker(t, func(context.Context) error {
		probes.Add(1)
		if healthy.Load() {
			return nil
		}
		return errBank
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = b.Run(ctx) }()
	for range 3 {
		record(b, errBank)
	}
	waited := make(chan error, 1)
	go func() {
		trial, err := b.Wait(t.Context())
		if err == nil && !trial {
			err = errors.New("Wait said closed, want a trial")
		}
		waited <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for probes.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no probes while open")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-waited:
		t.Fatal("Wait returned while the probe kept failing")
	default:
	}
	healthy.Store(true)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the probe answered")
	}
	if s := b.Status(); s.State != circuit.HalfOpen {
		t.Fatalf("state after a good probe = %v, want half_open", s.State)
	}
	// Half-open: the first failure opens it again at once ...
	record(b, errBank)
	if s := b.Status(); s.State != circuit.Open {
		t.Fatalf("state after a failure while half-open = %v, want open", s.State)
	}
	// ... and once a probe answers, the trial's success closes it.
	if trial, err := b.Wait(t.Context()); err != nil || !trial {
		t.Fatal(trial, err)
	}
	tk, err := b.Allow()
	if err != nil {
		t.Fatalf("the trial call was refused: %v", err)
	}
	b.Record(tk, nil)
	if s := b.Status(); s.State != circuit.Closed || s.Failures != 0 {
		t.Fatalf("status after a success while half-open = %+v, want closed", s)
	}
}

func TestWaitReturnsOnCancel(t *testing.T) {
	b := newBreaker(t, nil)
	for range 3 {
		record(b, errBank)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

func TestBadOptions(t *testing.T) {
	for name, o := range map[string]circuit.Options{
		"negative threshold":          {Threshold: -1},
		"max interval below interval": {ProbeInterval: time.Minute, MaxProbeInterval: time.Second},
	} {
		if _, err := circuit.New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}

func open(t *testing.T, b *circuit.Breaker) {
	t.Helper()
	for range 3 {
		record(b, errBank)
	}
	if b.Status().State != circuit.Open {
		t.Fatal("not open after 3 failures")
	}
}

func waitState(t *testing.T, b *circuit.Breaker, want circuit.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.Status().State != want {
		if time.Now().After(deadline) {
			t.Fatalf("state %v, want %v", b.Status().State, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Half-open admits exactly one trial call; Wait pauses receiving while it
// is out; a trial abandoned by its caller is given to the next one.
func TestHalfOpenAdmitsExactlyOneTrialCall(t *testing.T) {
	b := newBreaker(t, func(context.Context) error { return nil })
	go func() { _ = b.Run(t.Context()) }()
	open(t, b)
	waitState(t, b, circuit.HalfOpen)
	if trial, err := b.Wait(t.Context()); err != nil || !trial {
		t.Fatalf("Wait while half-open = %v %v, want a trial", trial, err)
	}
	tk, err := b.Allow()
	if err != nil {
		t.Fatalf("the first call while half-open was refused: %v", err)
	}
	for i := range 20 {
		if _, err := b.Allow(); !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("call %d while the trial is out: %v, want ErrOpen", i+2, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while the trial is out = %v, want it to block", err)
	}
	b.Abandon(tk)
	tk, err = b.Allow()
	if err != nil {
		t.Fatalf("after the trial was abandoned the next call was refused: %v", err)
	}
	b.Record(tk, nil)
	if s := b.Status(); s.State != circuit.Closed || allowed(b) != nil {
		t.Fatalf("after a successful trial: %+v, want closed", s)
	}
	if trial, err := b.Wait(t.Context()); err != nil || trial {
		t.Fatalf("Wait while closed = %v %v, want no trial", trial, err)
	}
}

// A health check that always answers while every real call fails (an
// end-of-day window behind a healthy gateway): each failed trial doubles
// the interval up to its cap, so trials grow rare, and a success resets it.
func TestALyingHealthCheckCannotHoldTheIntervalAtItsMinimum(t *testing.T) {
	var probes atomic.Int64
	b, err := circuit.New(circuit.Options{Name: "bank", Threshold: 3, ProbeInterval: 5 * time.Millisecond,
		MaxProbeInterval: 40 * time.Millisecond, Logger: quiet,
		Probe: func(context.Context) error { probes.Add(1); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.Run(t.Context()) }()
	open(t, b)
	var intervals []time.Duration
	for range 6 {
		waitState(t, b, circuit.HalfOpen)
		tk, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		b.Record(tk, errBank) // the trial fails
		intervals = append(intervals, b.Status().NextProbeIn)
	}
	want := []time.Duration{10, 20, 40, 40, 40, 40}
	for i := range want {
		if intervals[i] != want[i]*time.Millisecond {
			t.Fatalf("intervals after failed trials %v, want %v ms", intervals, want)
		}
	}
	if s := b.Status(); s.Opens != 7 {
		t.Fatalf("opened %d times, want 7", s.Opens)
	}
	waitState(t, b, circuit.HalfOpen)
	tk, _ := b.Allow()
	b.Record(tk, nil)
	if s := b.Status(); s.State != circuit.Closed || s.NextProbeIn != 5*time.Millisecond {
		t.Fatalf("after a good trial %+v, want closed with the interval back at its minimum", s)
	}
}

// Without a health path the circuit half-opens when the interval passes,
// and the trial call is the probe.
func TestWithoutAProbeTheTrialCallIsTheProbe(t *testing.T) {
	b := newBreaker(t, nil)
	go func() { _ = b.Run(t.Context()) }()
	open(t, b)
	waitState(t, b, circuit.HalfOpen)
	tk, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.Record(tk, errBank)
	if s := b.Status(); s.State != circuit.Open || s.NextProbeIn != 10*time.Millisecond {
		t.Fatalf("after a failed trial %+v, want open with the interval doubled", s)
	}
	waitState(t, b, circuit.HalfOpen)
}

// Only the trial's own result moves a half-open circuit: the result of a
// call allowed in an earlier era (a slow call started while closed, or one
// made regardless while open), or of a call that is not the trial, leaves
// it half-open with its trial as it was; and a trial that makes no call
// closes nothing and is given back, so that the next call is the trial and
// only a real success closes the circuit.
func TestOnlyTheTrialsOwnResultMovesAHalfOpenCircuit(t *testing.T) {
	for _, tt := range []struct {
		name string
		// from: the era the reported call was allowed in: "closed" (before
		// the circuit opened), "open" (made regardless), "half-open" (a
		// call besides the trial), or "none" (the trial, given back
		// without a call).
		from     string
		trialOut bool  // the trial is out when the result arrives
		result   error // what the call answered
	}{
		{name: "stale success from the closed era", from: "closed"},
		{name: "stale failure from the closed era", from: "closed", result: errBank},
		{name: "stale success while the trial is out", from: "closed", trialOut: true},
		{name: "stale failure while the trial is out", from: "closed", trialOut: true, result: errBank},
		{name: "success of a call made while open", from: "open"},
		{name: "failure of a call made while open", from: "open", result: errBank},
		{name: "success of a call besides the trial", from: "half-open", trialOut: true},
		{name: "failure of a call besides the trial", from: "half-open", trialOut: true, result: errBank},
		{name: "a trial that makes no call", from: "none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := circuit.New(circuit.Options{Name: "store", Threshold: 3, ProbeInterval: time.Millisecond,
				MaxProbeInterval: time.Millisecond, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			var stale circuit.Ticket
			if tt.from == "closed" {
				stale, _ = b.Allow() // a slow call, started while all was well
			}
			open(t, b)
			if tt.from == "open" {
				var err error
				if stale, err = b.Allow(); !errors.Is(err, circuit.ErrOpen) {
					t.Fatalf("Allow while open: %v, want ErrOpen", err)
				}
			}
			opens := b.Status().Opens
			go func() { _ = b.Run(t.Context()) }()
			waitState(t, b, circuit.HalfOpen)
			var trial circuit.Ticket
			if tt.trialOut || tt.from == "none" {
				if trial, err = b.Allow(); err != nil || !trial.Trial() {
					t.Fatalf("the first call while half-open: %v (trial %v), want the trial", err, trial.Trial())
				}
			}
			switch tt.from {
			case "half-open":
				other, err := b.Allow()
				if !errors.Is(err, circuit.ErrOpen) || other.Trial() {
					t.Fatalf("a second call while the trial is out: %v (trial %v), want ErrOpen", err, other.Trial())
				}
				b.Record(other, tt.result)
			case "none":
				b.Abandon(trial) // it found nothing to ask
			default:
				b.Record(stale, tt.result)
			}
			if s := b.Status(); s.State != circuit.HalfOpen || s.Opens != opens || s.TrialOut != tt.trialOut {
				t.Fatalf("after the result: %v, opened %d times (before %d), trial out %v; want half_open, unchanged, trial out %v",
					s.State, s.Opens, opens, s.TrialOut, tt.trialOut)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			got, err := b.Wait(ctx)
			switch {
			case tt.trialOut && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("Wait with the trial out: %v %v, want it to block", got, err)
			case !tt.trialOut && (err != nil || !got):
				t.Fatalf("Wait: %v %v, want the next message to be the trial", got, err)
			}
			if !tt.trialOut {
				if trial, err = b.Allow(); err != nil || !trial.Trial() {
					t.Fatalf("the next call: %v (trial %v), want it to be the trial", err, trial.Trial())
				}
			}
			b.Record(trial, nil) // the real success
			if s := b.Status(); s.State != circuit.Closed || s.Failures != 0 {
				t.Fatalf("after the trial's success: %+v, want closed", s)
			}
			if tt.from == "closed" {
				b.Record(stale, errBank) // and once closed again, the old call's failure counts for nothing
				if s := b.Status(); s.Failures != 0 {
					t.Fatalf("a failure from before the outage counted in the new era: %+v", s)
				}
			}
		})
	}
}
