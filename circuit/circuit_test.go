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
	go func() { waited <- b.Wait(t.Context()) }()
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
	// ... and once a probe answers, the first success closes it.
	if err := b.Wait(t.Context()); err != nil {
		t.Fatal(err)
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
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) {
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
