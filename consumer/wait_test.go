package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/consumer/consumertest"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

// schedule is the record of each charge, as a store keeps it: handled
// once, at or after its not-before. Its handler returns Wait until then,
// as the charge handler does for a record WAITING until T.
type schedule struct {
	t     *testing.T
	mu    sync.Mutex
	until map[string]time.Time // by body; wall clock, as the attribute holds it
	// wait, where set, is how long after its first arrival at the handler
	// a charge's time comes (its until is set then): a wait measured from
	// the charge's own first receive spans the same visibility periods
	// however late a loaded machine receives it.
	wait  map[string]time.Duration
	early map[string]int // handler calls before the time
	done  map[string][]time.Time
	top   map[string]int // highest receive count seen at the handler
}

func newSchedule(t *testing.T) *schedule {
	return &schedule{t: t, until: map[string]time.Time{}, wait: map[string]time.Duration{}, early: map[string]int{}, done: map[string][]time.Time{}, top: map[string]int{}}
}

func (s *schedule) Handle(_ context.Context, d *consumer.Delivery) consumer.Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := string(d.Body)
	s.top[key] = max(s.top[key], d.ReceiveCount)
	until, ok := s.until[key]
	if w, first := s.wait[key]; !ok && first {
		until, ok = time.Now().Add(w).Round(0), true
		s.until[key] = until
	}
	if !ok {
		s.t.Errorf("unknown message %q", key)
		return consumer.Decision{Action: consumer.Ack}
	}
	if now := time.Now().Round(0); now.Before(until) {
		s.early[key]++
		return consumer.Decision{Action: consumer.Wait, Until: until}
	}
	s.done[key] = append(s.done[key], time.Now())
	return consumer.Decision{Action: consumer.Ack}
}

func (s *schedule) handled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done)
}

// waitQueue is a queue with a redrive limit of two receives.
type waitQueue struct {
	name string
	// maxVis stands for SQS's 12 hours: long enough for the queue to
	// receive all 200 messages well within it.
	maxVis time.Duration
	open   func(t *testing.T) queue.Queue
}

var waitQueues = []waitQueue{
	{"memqueue", 60 * time.Millisecond, func(*testing.T) queue.Queue {
		dlq := memqueue.New(memqueue.Options{WaitTime: 10 * time.Millisecond})
		return memqueue.New(memqueue.Options{VisibilityTimeout: time.Second, WaitTime: 10 * time.Millisecond, MaxReceiveCount: 2, DLQ: dlq})
	}},
	{"sqlite", 250 * time.Millisecond, func(t *testing.T) queue.Queue {
		db := sqlitetest.Open(t, "q.db", sqlite.OpenOptions{Sync: sqlite.SyncNormal})
		q, err := sqlite.NewQueue(db, sqlite.QueueOptions{VisibilityTimeout: time.Second, MaxReceiveCount: 2,
			WaitTime: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond, SweepInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}},
}

// The durable schedule on the queue side: 200 charges, each waiting
// several visibility periods (the 12-hour cap, shortened), reach the
// handler once each at or after their time; none is handed over above
// receive count 2 or reaches the DLQ of a queue that dead-letters at the
// third receive; and while a requeued copy waits, the handler (the store)
// is not asked again.
func TestWaitsNeverMoveAMessageTowardTheDLQ(t *testing.T) {
	const n = 200
	for _, wq := range waitQueues {
		t.Run(wq.name, func(t *testing.T) {
			maxVis := wq.maxVis
			q := wq.open(t)
			s := newSchedule(t)
			msgs := make([]queue.Outgoing, n)
			for i := range msgs {
				msgs[i] = queue.Outgoing{Body: fmt.Appendf(nil, "charge-%03d", i), Attributes: map[string]string{"origin": "test"}}
			}
			for i := 0; i < n; i += queue.MaxReceive {
				if _, err := q.SendBatch(t.Context(), msgs[i:i+queue.MaxReceive]); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range msgs {
				// 3 to 6 visibility periods from its first receive.
				s.wait[string(m.Body)] = 3*maxVis + time.Duration(i)*3*maxVis/n
			}
			rt := consumertest.New(t, q, s, consumer.Options{Concurrency: 16, MaxVisibility: maxVis, Logger: quiet,
				BatchFillWait: time.Millisecond, AckFlushInterval: 5 * time.Millisecond})
			stop := consumertest.Start(t, rt)
			consumertest.WaitFor(t, "every charge handled", func() bool { return s.handled() == n })
			consumertest.WaitFor(t, "the queue empty", func() bool {
				d, err := q.Depth(t.Context())
				return err == nil && d.Waiting+d.InFlight == 0
			})
			stop()

			d, err := q.Depth(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if d.DLQ != 0 {
				t.Errorf("%d charges dead-lettered while waiting", d.DLQ)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for body := range s.wait {
				until := s.until[body]
				if got := s.done[body]; len(got) != 1 {
					t.Errorf("%s handled %d times, want once", body, len(got))
				} else if got[0].Before(until) {
					t.Errorf("%s handled at %s, before its time %s", body, got[0].Format(time.StampMicro), until.Format(time.StampMicro))
				}
				if s.top[body] > 2 {
					t.Errorf("%s reached the handler at receive count %d, want at most 2", body, s.top[body])
				}
				// Its first receive and the one after the first stretch
				// ask the record; the requeued copy waits without it.
				if s.early[body] > 2 {
					t.Errorf("%s reached the handler %d times before its time, want at most 2", body, s.early[body])
				}
			}
			st := rt.Stats()
			if st.Requeued < n/2 || st.Waited < 2*n {
				t.Errorf("waited %d, requeued %d: the waits did not span several visibility periods", st.Waited, st.Requeued)
			}
			if st.Parked != 0 || st.Retried != 0 || st.DeadLettered != 0 {
				t.Errorf("stats %+v: a wait was parked, retried or dead-lettered", st)
			}
			if mq, ok := q.(*memqueue.Queue); ok {
				// What a wait costs the queue: a visibility change, or (a
				// requeue) a send and a delete; nothing else.
				c := mq.Counts()
				if int64(c.Sends-n) != st.Requeued || int64(c.VisibilityChanges) != st.Waited-st.Requeued ||
					int64(c.AckedMessages) != st.Requeued+n {
					t.Errorf("queue calls %+v for %d waits (%d requeued) of %d charges", c, st.Waited, st.Requeued, n)
				}
			}
			t.Logf("%s: %d waits, %d requeued, %d received for %d charges", wq.name, st.Waited, st.Requeued, st.Received, n)
		})
	}
}

// dlqAttributes receives messages carrying dead-letter attributes (a
// message moved back from the DLQ by hand, around Redrive), and records
// what is sent.
type dlqAttributes struct {
	*memqueue.Queue
	mu   sync.Mutex
	sent []map[string]string
}

func (s *dlqAttributes) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	msgs, err := s.Queue.Receive(ctx, max)
	for i := range msgs {
		if msgs[i].Attributes == nil {
			msgs[i].Attributes = map[string]string{}
		}
		msgs[i].Attributes[queue.CodeAttribute] = "debit_failed"
	}
	return msgs, err
}

func (s *dlqAttributes) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	s.mu.Lock()
	s.sent = append(s.sent, maps.Clone(attrs))
	s.mu.Unlock()
	return s.Queue.Send(ctx, body, attrs)
}

// receives records the receive count of each delivery a handler is
// given, and how many it acked.
type receives struct {
	mu     sync.Mutex
	counts []int
	acked  int
}

func (r *receives) add(d *consumer.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = append(r.counts, d.ReceiveCount)
}

// seen is the receive counts recorded so far, and the acks.
func (r *receives) seen() ([]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.counts), r.acked
}

// waitThenAck is a handler that records each delivery in r, has it wait
// until until, and acks it once until has passed.
func waitThenAck(r *receives, until time.Time) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.counts = append(r.counts, d.ReceiveCount)
		if time.Now().Before(until) {
			return consumer.Decision{Action: consumer.Wait, Until: until}
		}
		r.acked++
		return consumer.Decision{Action: consumer.Ack}
	})
}

// The copy a requeue sends carries the original's attributes (without the
// dead-letter ones) and the not-before; the original is deleted, and the
// copy starts at receive count 0.
func TestARequeuedCopyCarriesTheAttributesAndTheNotBefore(t *testing.T) {
	q, dlq := newQueue(time.Minute)
	src := &dlqAttributes{Queue: q}
	if _, err := q.Send(t.Context(), []byte("charge-1"), map[string]string{"origin": "batch-7", "traceparent": "00-abc-def-01"}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	var r receives
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		r.add(d)
		return consumer.Decision{Action: consumer.Wait, Until: until}
	}), consumer.Options{MaxVisibility: 20 * time.Millisecond, Logger: quiet})
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "the copy requeued twice", func() bool { return rt.Stats().Requeued >= 2 })
	stop()

	want := map[string]string{"origin": "batch-7", "traceparent": "00-abc-def-01", queue.NotBeforeAttribute: until.UTC().Format(time.RFC3339Nano)}
	src.mu.Lock()
	for i, got := range src.sent {
		if !maps.Equal(got, want) {
			t.Errorf("copy %d sent with %v, want %v", i, got, want)
		}
	}
	src.mu.Unlock()
	msgs := q.Messages()
	if len(msgs) != 1 || msgs[0].ReceiveCount > 1 || string(msgs[0].Body) != "charge-1" {
		t.Fatalf("queue holds %+v, want the one copy at receive count 0 or 1", msgs)
	}
	if calls, _ := r.seen(); fmt.Sprint(calls) != "[1 2]" {
		t.Errorf("handler called at receive counts %v, want [1 2]: a copy that waits is not handed over", calls)
	}
	if dlq.Len() != 0 {
		t.Errorf("%d dead-lettered", dlq.Len())
	}
}

// A not-before that does not parse, or lies more than 400 days ahead, is
// ignored: the message is handled at once (its record decides). One in the
// past is due.
func TestABogusNotBeforeIsHandledAtOnce(t *testing.T) {
	for name, v := range map[string]string{
		"garbage":        "next tuesday",
		"no zone":        "2030-01-02T03:04:05",
		"empty":          "",
		"500 days ahead": time.Now().Add(500 * 24 * time.Hour).UTC().Format(time.RFC3339Nano),
		"past":           time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano),
	} {
		t.Run(name, func(t *testing.T) {
			q, _ := newQueue(time.Minute)
			if _, err := q.Send(t.Context(), []byte("charge-1"), map[string]string{queue.NotBeforeAttribute: v}); err != nil {
				t.Fatal(err)
			}
			handled := make(chan int, 4)
			rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
				handled <- d.ReceiveCount
				return consumer.Decision{Action: consumer.Ack}
			}), consumer.Options{Logger: quiet})
			stop := consumertest.Start(t, rt)
			select {
			case n := <-handled:
				if n != 1 {
					t.Errorf("handled at receive count %d, want 1", n)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not handled")
			}
			consumertest.WaitFor(t, "acked", func() bool { return q.Len() == 0 })
			stop()
			if s := rt.Stats(); s.Waited != 0 {
				t.Errorf("waited %d times", s.Waited)
			}
		})
	}
}

// failingSend is a queue whose sends fail.
type failingSend struct {
	*memqueue.Queue
	sends atomic.Int64
}

func (s *failingSend) Send(context.Context, []byte, map[string]string) (string, error) {
	s.sends.Add(1)
	return "", errors.New("SendMessage: throttled")
}

// noSend is a source that cannot send (no consumer.Sender).
type noSend struct{ consumer.Source }

// forwarding wraps a source and forwards Send, as a wrapping Source does
// (consumer.Send: ErrCannotSend when the wrapped one cannot).
type forwarding struct{ consumer.Source }

func (f forwarding) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	return consumer.Send(ctx, f.Source, body, attrs)
}

// A copy that cannot be sent (the send fails, or the source cannot send)
// falls back to the visibility: the message still waits, and is handled
// once at its time (the receive count grows, as a Retry's would).
func TestARequeueThatCannotSendFallsBackToTheVisibility(t *testing.T) {
	for name, wrap := range map[string]func(*memqueue.Queue) (consumer.Source, *atomic.Int64){
		"send fails": func(q *memqueue.Queue) (consumer.Source, *atomic.Int64) {
			s := &failingSend{Queue: q}
			return s, &s.sends
		},
		"no sender": func(q *memqueue.Queue) (consumer.Source, *atomic.Int64) { return noSend{q}, new(atomic.Int64) },
		"wrapped, no sender": func(q *memqueue.Queue) (consumer.Source, *atomic.Int64) {
			return forwarding{noSend{q}}, new(atomic.Int64)
		},
	} {
		t.Run(name, func(t *testing.T) {
			q, dlq := newQueue(time.Minute)
			send(t, q, 1)
			until := time.Now().Add(150 * time.Millisecond).Round(0)
			var r receives
			src, sends := wrap(q)
			rt := consumertest.New(t, src, waitThenAck(&r, until), consumer.Options{MaxVisibility: 40 * time.Millisecond, Logger: quiet})
			runUntilEmpty(t, rt, q, "handled")
			counts, _ := r.seen()
			if len(counts) < 3 || counts[len(counts)-1] != len(counts) {
				t.Errorf("receive counts at the handler %v: want one receive per stretch of visibility", counts)
			}
			if s := rt.Stats(); s.Requeued != 0 || int(s.Waited) != len(counts)-1 {
				t.Errorf("requeued %d, waited %d for %d deliveries", s.Requeued, s.Waited, len(counts))
			}
			if name == "send fails" && sends.Load() == 0 {
				t.Error("no send was tried")
			}
			if dlq.Len() != 0 {
				t.Errorf("%d dead-lettered", dlq.Len())
			}
		})
	}
}

// pausedGate lets receiving go on but reports the dependency paused (a
// circuit on trial, say).
type pausedGate struct{}

func (pausedGate) Wait(context.Context) (bool, error) { return false, nil }
func (pausedGate) Paused() bool                       { return true }

// A wait while the gate is paused is not kept in hand: it is no retry, and
// the message goes back to the queue until its time.
func TestAWaitIsNeverParked(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 3)
	var decisions atomic.Int64
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision {
		return consumer.Decision{Action: consumer.Wait, Until: time.Now().Add(time.Hour)}
	}), consumer.Options{Gate: pausedGate{}, Logger: quiet, OnDecision: func(_ queue.Message, d consumer.Decision, _ time.Duration) {
		if d.Action != consumer.Wait || d.Until.IsZero() {
			t.Errorf("OnDecision got %+v, want the Wait", d)
		}
		decisions.Add(1)
	}})
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "three waits", func() bool { return rt.Stats().Waited == 3 })
	stop()
	s := rt.Stats()
	if s.Parked != 0 || s.InHand != 0 || s.Retried != 0 || s.Released != 0 {
		t.Errorf("stats %+v: a wait was parked or retried", s)
	}
	if decisions.Load() != 3 {
		t.Errorf("OnDecision called %d times, want 3", decisions.Load())
	}
	d, _ := q.Depth(t.Context())
	if d.InFlight != 3 {
		t.Errorf("depth %+v: the waiting messages should be invisible on the queue", d)
	}
}

// countingSource counts the calls that reach the queue.
type countingSource struct {
	*boundReceives
	visibility, sends atomic.Int64
}

func (s *countingSource) ChangeVisibility(ctx context.Context, m queue.Message, d time.Duration) error {
	s.visibility.Add(1)
	return s.boundReceives.ChangeVisibility(ctx, m, d)
}

func (s *countingSource) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	s.sends.Add(1)
	return s.boundReceives.Send(ctx, body, attrs)
}

// A wait recorded with the message's rescheduling (a SQL queue's claim
// made in the receive) sends nothing more; an unsettled one is applied.
func TestASettledWaitSendsNothing(t *testing.T) {
	q, _ := newQueue(time.Minute)
	send(t, q, 10)
	src := &countingSource{boundReceives: &boundReceives{Queue: q}}
	rt := consumertest.New(t, src, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		var i int
		fmt.Sscanf(string(d.Body), "m%d", &i)
		if i%2 == 0 {
			d.Bound.(*settledBound).settled.Store(true)
		}
		return consumer.Decision{Action: consumer.Wait, Until: time.Now().Add(time.Hour)}
	}), consumer.Options{Logger: quiet})
	stop := consumertest.Start(t, rt)
	consumertest.WaitFor(t, "ten waits", func() bool { return rt.Stats().Waited == 10 })
	stop()
	if v, s, a := src.visibility.Load(), src.sends.Load(), src.acks.Load(); v != 5 || s != 0 || a != 0 {
		t.Errorf("visibility changes %d, sends %d, acks %d; want 5, 0, 0", v, s, a)
	}
}
