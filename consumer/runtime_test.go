package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/consumer/consumertest"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newQueue(vis time.Duration) (*memqueue.Queue, *memqueue.Queue) {
	dlq := memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	q := memqueue.New(memqueue.Options{VisibilityTimeout: vis, WaitTime: 20 * time.Millisecond, DLQ: dlq})
	return q, dlq
}

func send(t *testing.T, q *memqueue.Queue, n int) {
	t.Helper()
	for i := range n {
		if _, err := q.Send(t.Context(), fmt.Appendf(nil, "m%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// newRuntime is consumer.New(src, h, o), failing the test on an error.

// runUntilEmpty runs rt until q holds no message (what names the wait),
// then stops it.
func runUntilEmpty(t *testing.T, rt *consumer.Runtime, q *memqueue.Queue, what string) {
	t.Helper()
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, what, func() bool { return q.Len() == 0 })
	stop()
}

func TestAcksAreBatchedAndEveryMessageDeleted(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 95)
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision {
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 20, Logger: quiet, AckFlushInterval: 20 * time.Millisecond})
	runUntilEmpty(t, rt, q, "queue drained")
	c := q.Counts()
	if c.AckedMessages != 95 || rt.Stats().Acked != 95 {
		t.Fatalf("acked %d (stats %d), want 95", c.AckedMessages, rt.Stats().Acked)
	}
	if c.Acks > 15 {
		t.Fatalf("%d delete calls for 95 messages: acks are not batched", c.Acks)
	}
}

func TestConcurrencyIsBounded(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 60)
	var cur, peak atomic.Int64
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		cur.Add(-1)
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 4, BatchSize: 10, Logger: quiet})
	runUntilEmpty(t, rt, q, "queue drained")
	if p := peak.Load(); p > 4 || p < 2 {
		t.Fatalf("peak concurrency %d, want 2..4", p)
	}
}

func TestRetryLeavesTheMessageForRedelivery(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 1)
	var seen []int
	var mu sync.Mutex
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, d.ReceiveCount)
		if d.ReceiveCount < 3 {
			return consumer.Decision{Action: consumer.Retry, RetryAfter: 30 * time.Millisecond}
		}
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Logger: quiet})
	runUntilEmpty(t, rt, q, "queue drained")
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[1 2 3]" {
		t.Fatalf("receive counts seen = %v, want [1 2 3]", seen)
	}
	if s := rt.Stats(); s.Retried != 2 || s.Acked != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestDefaultBackoffGrowsWithReceiveCount(t *testing.T) {
	b := consumer.ExponentialBackoff(time.Second, time.Minute)
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 7: time.Minute, 100: time.Minute} {
		if got := b(n); got != want {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestDeadLetterForwardsWithReasonAndDeletes(t *testing.T) {
	q, dlq := newQueue(time.Minute)
	send(t, q, 3)
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		return consumer.Decision{Action: consumer.DeadLetter, Reason: queue.Reason{Code: "invalid", Detail: string(d.Body)}}
	}), consumer.Options{Logger: quiet})
	runUntilEmpty(t, rt, q, "queue drained")
	msgs := dlq.Messages()
	if len(msgs) != 3 {
		t.Fatalf("DLQ holds %d, want 3", len(msgs))
	}
	for _, m := range msgs {
		if r := queue.ReasonFromAttributes(m.Attributes); r.Code != "invalid" || r.Detail != string(m.Body) {
			t.Fatalf("DLQ message %q has reason %+v", m.Body, r)
		}
	}
}

func TestPanicIsRetriedNotAcked(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 1)
	var calls atomic.Int64
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Logger: quiet, Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
	runUntilEmpty(t, rt, q, "queue drained")
	if s := rt.Stats(); s.Panics != 1 || s.Acked != 1 || calls.Load() != 2 {
		t.Fatalf("stats %+v, calls %d", s, calls.Load())
	}
}

func TestHeartbeatKeepsASlowMessageInvisibleAndRunsBeats(t *testing.T) {
	q, _ := newQueue(time.Second)
	send(t, q, 1)
	var beats, handled atomic.Int64
	release := make(chan struct{})
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		handled.Add(1)
		unregister := d.Register(func(context.Context) error { beats.Add(1); return nil })
		defer unregister()
		<-release
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 2, VisibilityTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond, Logger: quiet})
	stop := consumertest.Start(t, rt)
	time.Sleep(2500 * time.Millisecond) // two and a half visibility timeouts
	close(release)
	consumertest.WaitFor(t, "queue drained", func() bool { return q.Len() == 0 })
	stop()
	if handled.Load() != 1 {
		t.Fatalf("handled %d times: the heartbeat did not keep the message invisible", handled.Load())
	}
	if beats.Load() < 10 {
		t.Fatalf("registered beat ran %d times, want >= 10", beats.Load())
	}
}

func TestGracefulShutdownFinishesInFlightWork(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 8)
	entered := make(chan struct{}, 8)
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
		entered <- struct{}{}
		time.Sleep(100 * time.Millisecond)
		if ctx.Err() != nil {
			return consumer.Decision{Action: consumer.Retry}
		}
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 8, BatchSize: 8, ShutdownTimeout: 5 * time.Second, Logger: quiet})
	stop := consumertest.Start(t, rt)
	for range 8 {
		<-entered
	}
	stop() // all eight are mid-flight
	if q.Len() != 0 || rt.Stats().Acked != 8 {
		t.Fatalf("after shutdown: depth %d, acked %d; in-flight work should have finished and been acked", q.Len(), rt.Stats().Acked)
	}
}

func TestShutdownDeadlineNeverAcksUnfinishedWork(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 10)
	var (
		mu       sync.Mutex
		finished = map[string]bool{} // message ids whose handler completed its work
	)
	entered := make(chan struct{}, 10)
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
		entered <- struct{}{}
		var n int
		fmt.Sscanf(string(d.Body), "m%d", &n)
		if n%2 == 0 { // quick ones finish
			mu.Lock()
			finished[d.ID] = true
			mu.Unlock()
			return consumer.Decision{Action: consumer.Ack}
		}
		<-ctx.Done() // slow ones outlive the shutdown deadline
		return consumer.Decision{Action: consumer.Retry, Reason: queue.Reason{Code: "cancelled"}}
	}), consumer.Options{Concurrency: 10, BatchSize: 10, ShutdownTimeout: 100 * time.Millisecond, Logger: quiet})
	stop := consumertest.Start(t, rt)
	for range 10 {
		<-entered
	}
	stop()
	left := map[string]bool{}
	for _, m := range q.Messages() {
		left[m.ID] = true
	}
	mu.Lock()
	defer mu.Unlock()
	if len(finished) != 5 || len(left) != 5 {
		t.Fatalf("finished %d, left on the queue %d; want 5 and 5", len(finished), len(left))
	}
	for id := range finished {
		if left[id] {
			t.Errorf("message %s finished but was not acked before Run returned", id)
		}
	}
	if rt.Stats().Acked != 5 {
		t.Fatalf("acked %d, want 5", rt.Stats().Acked)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	q, _ := newQueue(time.Minute)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision { return consumer.Decision{} })
	for name, o := range map[string]consumer.Options{
		"batch over 10":                  {BatchSize: 11},
		"negative concurrency":           {Concurrency: -1},
		"heartbeat not below visibility": {VisibilityTimeout: time.Second, HeartbeatInterval: time.Second},
	} {
		if _, err := consumer.New(q, h, o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
}

func TestASlowMessageDoesNotStopOthersBeingReceived(t *testing.T) {
	q, _ := newQueue(time.Minute)
	release := make(chan struct{})
	handledFast := make(chan struct{})
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		if string(d.Body) == "slow" {
			<-release
		} else {
			close(handledFast)
		}
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 2, BatchSize: 10, Logger: quiet})
	if _, err := q.Send(t.Context(), []byte("slow"), nil); err != nil {
		t.Fatal(err)
	}
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "the slow message in flight", func() bool { return rt.Stats().InFlight == 1 })
	if _, err := q.Send(t.Context(), []byte("fast"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handledFast:
	case <-time.After(5 * time.Second):
		t.Fatal("a free slot was not used while another message was in flight")
	}
	close(release)
	consumertest.WaitFor(t, "queue drained", func() bool { return q.Len() == 0 })
	stop()
}

// gate is a hand-made consumer.Gate: closed until open is called.
type gate struct {
	mu   sync.Mutex
	ch   chan struct{}
	open bool
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) Wait(ctx context.Context) (bool, error) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	select {
	case <-ch:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (g *gate) Paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.open
}

func (g *gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		g.open = true
		close(g.ch)
	}
}

func TestClosedGateReceivesNothingAndReceiveCountsStayPut(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 5)
	var handled atomic.Int64
	g := newGate()
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		handled.Add(1)
		if d.ReceiveCount != 1 {
			t.Errorf("message %s received %d times, want once", d.ID, d.ReceiveCount)
		}
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 4, Gate: g, Logger: quiet})
	stop := consumertest.Start(t, rt)
	time.Sleep(300 * time.Millisecond) // many receive opportunities
	if n := handled.Load(); n != 0 || q.Len() != 5 {
		t.Fatalf("handled %d, queue %d while the gate was shut; want 0 and 5", n, q.Len())
	}
	for _, m := range q.Messages() {
		if m.ReceiveCount != 0 {
			t.Fatalf("message %s receive count %d while the gate was shut, want 0", m.ID, m.ReceiveCount)
		}
	}
	g.Open()
	consumertest.WaitFor(t, "queue drained", func() bool { return q.Len() == 0 })
	stop()
	if handled.Load() != 5 {
		t.Fatalf("handled %d, want 5", handled.Load())
	}
}

func TestABeatThatFailsRunsAgain(t *testing.T) {
	q, _ := newQueue(time.Second)
	send(t, q, 1)
	var beats atomic.Int64
	release := make(chan struct{})
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		unregister := d.Register(func(context.Context) error {
			if beats.Add(1) == 1 {
				return fmt.Errorf("store throttled")
			}
			return nil
		})
		defer unregister()
		<-release
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{VisibilityTimeout: time.Second, HeartbeatInterval: 50 * time.Millisecond, Logger: quiet})
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "beats after a failed one", func() bool { return beats.Load() >= 3 })
	close(release)
	stop()
}

// slowReceives makes every receive take a while and counts how many run at
// once.
type slowReceives struct {
	*memqueue.Queue
	cur, peak atomic.Int64
}

func (s *slowReceives) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	return s.Queue.Receive(ctx, max)
}

// Several receivers overlap their receives, share the handler slots, and
// hand out every message once.
func TestReceiversOverlapAndShareTheSlots(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 120)
	src := &slowReceives{Queue: q}
	var cur, peak atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		seen[string(d.Body)]++
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		cur.Add(-1)
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 8, BatchSize: 4, Receivers: 3, Logger: quiet})
	runUntilEmpty(t, rt, q, "queue drained")
	if p := src.peak.Load(); p < 2 || p > 3 {
		t.Errorf("receives at once: peak %d, want 2..3", p)
	}
	if p := peak.Load(); p > 8 {
		t.Errorf("handlers at once: peak %d, over the concurrency of 8", p)
	}
	if len(seen) != 120 {
		t.Errorf("%d distinct messages handled, want 120", len(seen))
	}
	for body, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", body, n)
		}
	}
	if a := rt.Stats().Acked; a != 120 {
		t.Errorf("acked %d, want 120", a)
	}
}

// settledBound is a message's claim whose result was written with the
// message's delete (as a queue that claims in its receive does).
type settledBound struct {
	driver.Bound
	settled atomic.Bool
}

func (b *settledBound) Settled() bool { return b.settled.Load() }

// releasedBound counts Release calls.
type releasedBound struct {
	driver.Bound
	released *atomic.Int64
}

func (b releasedBound) Release(context.Context) error { b.released.Add(1); return nil }

// lateReceive answers a receive only once the runtime is shutting down,
// with messages whose claims were made in it.
type lateReceive struct {
	*memqueue.Queue
	released atomic.Int64
}

func (s *lateReceive) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	<-ctx.Done()
	msgs, err := s.Queue.Receive(context.Background(), max)
	for i := range msgs {
		msgs[i].Bound = releasedBound{released: &s.released}
	}
	return msgs, err
}

// Messages received as shutdown began are handed back unhandled, and the
// claims their receive made are given up with them.
func TestMessagesReceivedAtShutdownGiveTheirClaimsUp(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 3)
	src := &lateReceive{Queue: q}
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision {
		t.Error("a message received at shutdown was handled")
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 4, Logger: quiet})
	stop := consumertest.Start(t, rt)
	time.Sleep(20 * time.Millisecond)
	stop()
	if n := src.released.Load(); n != 3 {
		t.Errorf("claims given up: %d, want 3", n)
	}
	if s := rt.Stats(); s.Released != 3 {
		t.Errorf("released %d messages, want 3", s.Released)
	}
}

// boundReceives attaches a settledBound to every message it receives, and
// counts the acks and dead-letters that reach the queue.
type boundReceives struct {
	*memqueue.Queue
	acks, deadLetters atomic.Int64
}

func (s *boundReceives) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	msgs, err := s.Queue.Receive(ctx, max)
	for i := range msgs {
		msgs[i].Bound = &settledBound{}
	}
	return msgs, err
}

func (s *boundReceives) Ack(ctx context.Context, msgs []queue.Message) error {
	s.acks.Add(int64(len(msgs)))
	return s.Queue.Ack(ctx, msgs)
}

func (s *boundReceives) DeadLetter(ctx context.Context, m queue.Message, r queue.Reason) error {
	s.deadLetters.Add(1)
	return s.Queue.DeadLetter(ctx, m, r)
}

// A message settled with its result (deleted or dead-lettered in that
// transaction) is not acked or dead-lettered again; one that was not
// settled is, as usual.
func TestASettledMessageIsNotSentAgain(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 40)
	src := &boundReceives{Queue: q}
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		var i int
		fmt.Sscanf(string(d.Body), "m%d", &i)
		if i%2 == 0 {
			// Settled by the handler's result: delete it as the queue's
			// transaction would have.
			if err := q.Ack(context.Background(), []queue.Message{d.Message}); err != nil {
				t.Errorf("settle: %v", err)
			}
			d.Bound.(*settledBound).settled.Store(true)
		}
		if i%4 < 2 {
			return consumer.Decision{Action: consumer.Ack}
		}
		return consumer.Decision{Action: consumer.DeadLetter, Reason: queue.Reason{Code: "debit_failed"}}
	}), consumer.Options{Concurrency: 8, Logger: quiet, AckFlushInterval: 5 * time.Millisecond})
	runUntilEmpty(t, rt, q, "queue drained")
	// Unsettled: i%4 == 1 acked (10), i%4 == 3 dead-lettered (10).
	if a, d := src.acks.Load(), src.deadLetters.Load(); a != 10 || d != 10 {
		t.Errorf("acks %d, dead-letters %d reached the queue; want 10 and 10 (the settled ones never)", a, d)
	}
	s := rt.Stats()
	if s.Acked != 20 || s.DeadLettered != 20 || s.AckErrors != 0 {
		t.Errorf("stats acked %d, dead-lettered %d, ack errors %d; want 20, 20, 0", s.Acked, s.DeadLettered, s.AckErrors)
	}
}

// sqsLimits is a queue that refuses, as SQS's SendMessage does, a message
// with more than 10 message attributes ("Number of message attributes [11]
// exceeds the allowed maximum [10]"), and whose receive adds the X-Ray
// trace header among a message's attributes, as awssqs.Queue.Receive does
// with the AWSTraceHeader system attribute.
type sqsLimits struct {
	*memqueue.Queue
	trace bool
	mu    sync.Mutex
	sent  []map[string]string
}

func (s *sqsLimits) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	msgs, err := s.Queue.Receive(ctx, max)
	if s.trace {
		for i := range msgs {
			if msgs[i].Attributes == nil {
				msgs[i].Attributes = map[string]string{}
			}
			msgs[i].Attributes["AWSTraceHeader"] = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
		}
	}
	return msgs, err
}

func (s *sqsLimits) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	if len(attrs) > 10 {
		return "", fmt.Errorf("SendMessage: InvalidParameterValue: Number of message attributes [%d] exceeds the allowed maximum [10]", len(attrs))
	}
	s.mu.Lock()
	s.sent = append(s.sent, attrs)
	s.mu.Unlock()
	return s.Queue.Send(ctx, body, attrs)
}

// A producer's message with 10 attributes (SQS's most), or 9 and an X-Ray
// trace header, waits across several stretches of visibility (a retry
// scheduled 24 hours on, past SQS's 12-hour cap). The requeue's copy adds
// not-before: 11 attributes, which SQS refuses, on every requeue; the
// runtime fell back to the visibility every time, the receive count grew
// with each stretch, and the waiting charge reached the DLQ (max_receives)
// in the middle of its wait — "a wait never moves a message toward the
// DLQ" did not hold for it.
func TestAttackAWaitingMessageWithTenAttributesReachesTheDLQ(t *testing.T) {
	for name, tc := range map[string]struct {
		attrs int
		trace bool
	}{
		"ten attributes":               {10, false},
		"nine and the trace header":    {9, true},
		"eight and the trace header":   {8, true},
		"one attribute (as a control)": {1, false},
	} {
		t.Run(name, func(t *testing.T) {
			dlq := memqueue.New(memqueue.Options{WaitTime: 10 * time.Millisecond})
			q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Minute, WaitTime: 10 * time.Millisecond, MaxReceiveCount: 3, DLQ: dlq})
			attrs := map[string]string{}
			for i := range tc.attrs {
				attrs[fmt.Sprintf("producer-%d", i)] = "v"
			}
			if _, err := q.Send(t.Context(), []byte("charge-1"), attrs); err != nil {
				t.Fatal(err)
			}
			src := &sqsLimits{Queue: q, trace: tc.trace}
			const stretch = 30 * time.Millisecond // SQS's 12 hours
			until := time.Now().Add(8 * stretch).Round(0)
			var r receives
			rt := consumertest.New(t, src, waitThenAck(&r, until), consumer.Options{MaxVisibility: stretch, Logger: quiet, AckFlushInterval: time.Millisecond})
			stop := consumertest.Start(t, rt)
			consumertest.WaitFor(t, "the charge handled or dead-lettered", func() bool {
				_, handled := r.seen()
				return handled == 1 || dlq.Len() > 0
			})
			stop()
			counts, handled := r.seen()
			if dlq.Len() != 0 || handled != 1 {
				t.Fatalf("a waiting charge with %d attributes (trace header %v) was dead-lettered in its wait (handled %d times; receive counts at the handler %v; requeued %d of %d waits)",
					tc.attrs, tc.trace, handled, counts, rt.Stats().Requeued, rt.Stats().Waited)
			}
			for _, c := range counts {
				if c > 2 {
					t.Errorf("receive counts at the handler %v: want none above 2", counts)
					break
				}
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			for _, a := range src.sent {
				for k, v := range attrs {
					if a[k] != v {
						t.Errorf("a requeued copy lost the producer's attribute %s: %v", k, a)
					}
				}
			}
		})
	}
}

// inFlightCap is SQS's quota on a standard queue's in-flight messages
// (about 120,000: received and not yet deleted, hidden by their
// visibility): at the quota a long-polling ReceiveMessage answers with no
// messages and no error (an OverLimit error with short polling), whatever
// is visible.
type inFlightCap struct {
	*memqueue.Queue
	cap int
}

func (s *inFlightCap) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	d, err := s.Queue.Depth(ctx)
	if err != nil {
		return nil, err
	}
	if d.InFlight >= s.cap {
		time.Sleep(10 * time.Millisecond) // the long poll, answered empty
		return nil, nil
	}
	return s.Queue.Receive(ctx, min(max, s.cap-d.InFlight))
}

// On SQS every waiting charge is an in-flight message: its wait is its
// visibility (up to 12 hours at a time, and the requeued copy is hidden
// again on its first receive). SQS caps a standard queue at about 120,000
// in-flight messages. With notice-first (--notice-lead 24h: every charge
// waits its lead; 2M charges a day) or a month-end of insufficient-funds
// retries (100,000 a day, each waiting a day or more), the waiting charges
// fill the quota, and from then on the queue hands out nothing: no new
// charge, and no charge whose wait ended (it is visible, but nothing is
// received), is debited until enough waits lapse — hours, and then the
// quota fills again. Here the quota is 20, 20 charges wait for an hour,
// and a 21st charge, due now, is never received.
//
// Not fixed here: the wait's mechanism on SQS must change (a schedule kept
// in the store, with the event encrypted as the issue allows, and the
// message deleted; or delayed copies of at most 15 minutes), which is a
// design decision, not a local fix.
func TestAttackWaitingChargesFillSQSInFlightQuotaAndStopTheQueue(t *testing.T) {
	t.Skip("design limit, not fixed: every waiting charge is an in-flight SQS message, and SQS stops receiving at ~120,000 in flight (see the comment)")
	const quota = 20
	q, _ := newQueue(time.Minute)
	for i := range quota {
		if _, err := q.Send(t.Context(), fmt.Appendf(nil, "waits-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	src := &inFlightCap{Queue: q, cap: quota}
	later := time.Now().Add(time.Hour)
	due := make(chan struct{})
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		if string(d.Body) == "due-now" {
			close(due)
			return consumer.Decision{Action: consumer.Ack}
		}
		return consumer.Decision{Action: consumer.Wait, Until: later} // the notice's lead
	}), consumer.Options{Logger: quiet})
	stop := consumertest.Start(t, rt)
	defer stop()
	consumertest.WaitFor(t, "the charges waiting", func() bool { return rt.Stats().Waited == quota })
	if _, err := q.Send(t.Context(), []byte("due-now"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-due:
	case <-time.After(3 * time.Second):
		t.Fatalf("%d charges wait (in flight on SQS) and a charge due now is not received: the queue stopped at its in-flight quota", quota)
	}
}

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
