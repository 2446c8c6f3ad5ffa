package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/consumer/consumertest"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
)

// outageBank is a dependency behind a real circuit breaker whose health
// check always answers (it lies) while every real call fails until up.
type outageBank struct {
	br    *circuit.Breaker
	up    atomic.Bool
	calls atomic.Int64 // calls that reached the bank
}

// handle is a handler's use of the bank: refused unsent while the circuit
// says so, retried (kept in hand by the runtime) on a failure.
func (b *outageBank) handle(_ context.Context, d *consumer.Delivery) consumer.Decision {
	tk, err := b.br.Allow()
	if err != nil {
		return consumer.Decision{Action: consumer.Retry, Reason: queue.Reason{Code: "circuit_open"}}
	}
	b.calls.Add(1)
	time.Sleep(2 * time.Millisecond)
	if !b.up.Load() {
		b.br.Record(tk, errors.New("HTTP 503"))
		return consumer.Decision{Action: consumer.Retry, Reason: queue.Reason{Code: "bank_unavailable"}, RetryAfter: 30 * time.Millisecond}
	}
	b.br.Record(tk, nil)
	return consumer.Decision{Action: consumer.Ack}
}

// The runtime's half of the outage rule: whatever the health check says,
// an outage costs a message at most one receive, and nothing reaches the
// queue's redrive limit. Half-open hands over one message at a time;
// messages retried while the circuit is not closed are kept in hand and
// handled again from memory.
func TestAnOutageBehindALyingHealthCheckCostsAMessageAtMostOneReceive(t *testing.T) {
	for _, concurrency := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("concurrency %d", concurrency), func(t *testing.T) {
			dlq := memqueue.New(memqueue.Options{WaitTime: 10 * time.Millisecond})
			q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Second, WaitTime: 10 * time.Millisecond, MaxReceiveCount: 3, DLQ: dlq})
			send(t, q, 60)
			br, err := circuit.New(circuit.Options{Name: "bank", Threshold: 3, ProbeInterval: 5 * time.Millisecond,
				MaxProbeInterval: 40 * time.Millisecond, Logger: quiet, Probe: func(context.Context) error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			bank := &outageBank{br: br}
			var mu sync.Mutex
			maxCount := map[string]int{}
			var acked atomic.Int64
			rt := consumertest.New(t, q, consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
				mu.Lock()
				maxCount[d.ID] = max(maxCount[d.ID], d.ReceiveCount)
				mu.Unlock()
				dec := bank.handle(ctx, d)
				if dec.Action == consumer.Ack {
					acked.Add(1)
				}
				return dec
			}), consumer.Options{Concurrency: concurrency, Gate: br, VisibilityTimeout: time.Second,
				HeartbeatInterval: 100 * time.Millisecond, BatchFillWait: time.Millisecond, Logger: quiet,
				Backoff: func(int) time.Duration { return 0 }})
			ctx, cancel := context.WithCancel(t.Context())
			go func() { _ = br.Run(ctx) }()
			defer cancel()
			stop := consumertest.Start(t, rt)
			time.Sleep(800 * time.Millisecond) // the outage
			opens := br.Status().Opens
			bank.up.Store(true)
			consumertest.WaitFor(t, "every message acked", func() bool { return acked.Load() == 60 })
			stop()
			if n := dlq.Len(); n != 0 {
				t.Fatalf("%d messages dead-lettered by the redrive limit during the outage", n)
			}
			mu.Lock()
			defer mu.Unlock()
			for id, n := range maxCount {
				if n > 1 {
					t.Errorf("message %s was received %d times: the outage cost it %d extra receives", id, n, n-1)
				}
			}
			s := rt.Stats()
			if opens < 3 || s.Parked == 0 || s.Unparked == 0 {
				t.Fatalf("circuit opened %d times, %d parked, %d handled again from memory: the outage was not exercised", opens, s.Parked, s.Unparked)
			}
			if s.InHand != 0 || q.Len() != 0 {
				t.Fatalf("%d still parked, %d on the queue after the drain", s.InHand, q.Len())
			}
			t.Logf("bank calls %d for 60 messages, circuit opened %d times, parked %d, received %d", bank.calls.Load(), opens, s.Parked, s.Received)
		})
	}
}

// A runtime stopped while messages are parked hands them back to the queue.
func TestParkedMessagesAreHandedBackAtShutdown(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 3)
	br, err := circuit.New(circuit.Options{Name: "bank", Threshold: 1, ProbeInterval: time.Hour, MaxProbeInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	bank := &outageBank{br: br}
	rt := consumertest.New(t, q, consumer.HandlerFunc(bank.handle), consumer.Options{Concurrency: 4, Gate: br,
		BatchFillWait: 20 * time.Millisecond, Logger: quiet, Backoff: func(int) time.Duration { return 0 }})
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "three messages parked", func() bool { return rt.Stats().InHand == 3 })
	stop()
	if s := rt.Stats(); s.InHand != 0 || s.Released != 3 {
		t.Fatalf("after shutdown %d in hand, %d released; want 0 and 3", s.InHand, s.Released)
	}
	for _, m := range q.Messages() {
		if m.ReceiveCount != 1 {
			t.Fatalf("message %s receive count %d, want 1", m.ID, m.ReceiveCount)
		}
	}
	var got int
	for deadline := time.Now().Add(time.Second); got < 3 && time.Now().Before(deadline); {
		msgs, err := q.Receive(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	if got != 3 {
		t.Fatalf("after shutdown the queue gave %d messages within a second, want the 3 handed back, visible when due (30 ms)", got)
	}
}

// Gates lets receiving go on only when every gate does, is on trial when
// any is, and paused when any is.
func TestGatesCombine(t *testing.T) {
	newBr := func() *circuit.Breaker {
		b, err := circuit.New(circuit.Options{Threshold: 1, ProbeInterval: 5 * time.Millisecond, MaxProbeInterval: 5 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bank, store := newBr(), newBr()
	g := consumer.Gates(bank, nil, store)
	if trial, err := g.Wait(t.Context()); err != nil || trial || g.Paused() {
		t.Fatalf("both closed: trial %v, err %v, paused %v", trial, err, g.Paused())
	}
	tk, _ := store.Allow()
	store.Record(tk, errors.New("store down"))
	if !g.Paused() {
		t.Fatal("not paused with the store's circuit open")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	if _, err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with the store's circuit open: %v, want it to block", err)
	}
	go func() { _ = store.Run(t.Context()) }() // no probe: half-opens after the interval
	if trial, err := g.Wait(t.Context()); err != nil || !trial {
		t.Fatalf("store on trial: trial %v, err %v", trial, err)
	}
	tk, err := store.Allow() // the trial
	if err != nil || !tk.Trial() {
		t.Fatalf("the store's trial call: %v, trial %v", err, tk.Trial())
	}
	store.Record(tk, nil)
	if trial, err := g.Wait(t.Context()); err != nil || trial || g.Paused() {
		t.Fatalf("store closed again: trial %v, err %v, paused %v", trial, err, g.Paused())
	}
	if consumer.Gates(bank) != consumer.Gate(bank) {
		t.Fatal("one gate is not returned as it is")
	}
}

// flakyVisibility fails every visibility change while down (a queue in a
// database that is unreachable as well).
type flakyVisibility struct {
	*memqueue.Queue
	down atomic.Bool
}

func (f *flakyVisibility) ChangeVisibility(ctx context.Context, m queue.Message, d time.Duration) error {
	if f.down.Load() {
		return errors.New("database is locked")
	}
	return f.Queue.ChangeVisibility(ctx, m, d)
}

// A parked message stays in hand while its visibility cannot be extended
// for a moment, and is handled from memory afterwards: one receive.
func TestAParkedMessageSurvivesFailedVisibilityExtensions(t *testing.T) {
	q, _ := newQueue(2 * time.Second)
	src := &flakyVisibility{Queue: q}
	send(t, q, 1)
	br, err := circuit.New(circuit.Options{Name: "bank", Threshold: 1, ProbeInterval: 50 * time.Millisecond, MaxProbeInterval: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = br.Run(t.Context()) }()
	bank := &outageBank{br: br}
	var r receives
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
		r.add(d)
		return bank.handle(ctx, d)
	}), consumer.Options{Concurrency: 2, Gate: br, VisibilityTimeout: 2 * time.Second, HeartbeatInterval: 20 * time.Millisecond,
		Logger: quiet, Backoff: func(int) time.Duration { return 0 }})
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "the message parked", func() bool { return rt.Stats().InHand == 1 })
	src.down.Store(true)
	time.Sleep(200 * time.Millisecond) // ~10 failed extensions
	if n := rt.Stats().InHand; n != 1 {
		t.Fatalf("%d in hand after failed extensions, want the message kept", n)
	}
	src.down.Store(false)
	bank.up.Store(true)
	consumertest.WaitFor(t, "the message acked", func() bool { return q.Len() == 0 })
	stop()
	counts, _ := r.seen()
	for _, c := range counts {
		if c != 1 {
			t.Fatalf("receive counts at each handling %v, want 1 throughout", counts)
		}
	}
}
