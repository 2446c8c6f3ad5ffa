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
		b.Record(errBank)
		b.Record(errBank)
		b.Record(nil)
	}
	if s := b.Status(); s.State != circuit.Closed || b.Allow() != nil {
		t.Fatalf("state %v after interleaved failures, want closed", s.State)
	}
	b.Record(errBank)
	b.Record(errBank)
	b.Record(errBank)
	if s := b.Status(); s.State != circuit.Open || s.LastError != errBank.Error() || s.OpenedAt.IsZero() {
		t.Fatalf("status %+v after 3 consecutive failures, want open", s)
	}
	if !errors.Is(b.Allow(), circuit.ErrOpen) {
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
		b.Record(errBank)
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
	b.Record(errBank)
	if s := b.Status(); s.State != circuit.Open {
		t.Fatalf("state after a failure while half-open = %v, want open", s.State)
	}
	// ... and once a probe answers, the trial's success closes it.
	if trial, err := b.Wait(t.Context()); err != nil || !trial {
		t.Fatal(trial, err)
	}
	if err := b.Allow(); err != nil {
		t.Fatalf("the trial call was refused: %v", err)
	}
	b.Record(nil)
	if s := b.Status(); s.State != circuit.Closed || s.Failures != 0 {
		t.Fatalf("status after a success while half-open = %+v, want closed", s)
	}
}

func TestWaitReturnsOnCancel(t *testing.T) {
	b := newBreaker(t, nil)
	for range 3 {
		b.Record(errBank)
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
		b.Record(errBank)
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
	if err := b.Allow(); err != nil {
		t.Fatalf("the first call while half-open was refused: %v", err)
	}
	for i := range 20 {
		if err := b.Allow(); !errors.Is(err, circuit.ErrOpen) {
			t.Fatalf("call %d while the trial is out: %v, want ErrOpen", i+2, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while the trial is out = %v, want it to block", err)
	}
	b.Abandon()
	if err := b.Allow(); err != nil {
		t.Fatalf("after the trial was abandoned the next call was refused: %v", err)
	}
	b.Record(nil)
	if s := b.Status(); s.State != circuit.Closed || b.Allow() != nil {
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
		if err := b.Allow(); err != nil {
			t.Fatal(err)
		}
		b.Record(errBank) // the trial fails
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
	_ = b.Allow()
	b.Record(nil)
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
	if err := b.Allow(); err != nil {
		t.Fatal(err)
	}
	b.Record(errBank)
	if s := b.Status(); s.State != circuit.Open || s.NextProbeIn != 10*time.Millisecond {
		t.Fatalf("after a failed trial %+v, want open with the interval doubled", s)
	}
	waitState(t, b, circuit.HalfOpen)
}
