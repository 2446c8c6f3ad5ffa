package calendar_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/finedge/idempotent-consumer/app/calendar"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/consumer/consumertest"
	"github.com/finedge/idempotent-consumer/memqueue"
)

// Outside the posting window nothing is received: 1,000 charges sent on
// a Sunday stay at receive count 0 while the runtime waits at the
// calendar's gate, and once the window opens on Monday each is handled
// once, at its first receive.
func TestOutsideThePostingWindowNothingIsReceived(t *testing.T) {
	cal, err := calendar.Parse("Mon-Fri 06:00-20:00 Asia/Kolkata", calendar.Holidays{})
	if err != nil {
		t.Fatal(err)
	}
	kolkata := cal.Windows()[0].Loc
	clock := newFakeClock(time.Date(2025, 3, 16, 9, 0, 0, 0, kolkata)) // Sunday
	gate := calendar.NewGate(cal, clock)
	var _ consumer.Gate = gate

	dlq := memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Minute, WaitTime: 20 * time.Millisecond, DLQ: dlq})
	for i := range 1000 {
		if _, err := q.Send(t.Context(), fmt.Appendf(nil, "charge-%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	handled := map[string]int{}
	counts := map[int]int{}
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		mu.Lock()
		defer mu.Unlock()
		handled[string(d.Body)]++
		counts[d.ReceiveCount]++
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 32, Receivers: 2, Gate: gate, Logger: slog.New(slog.DiscardHandler), AckFlushInterval: 5 * time.Millisecond})
	stop := consumertest.Start(t, rt)
	// The receivers are at the gate, asleep until the clock moves.
	select {
	case <-clock.armed:
	case <-time.After(10 * time.Second):
		t.Fatal("the runtime did not wait at the gate")
	}
	if c := q.Counts(); c.Receives != 0 {
		t.Fatalf("%d receives outside the window", c.Receives)
	}
	for _, m := range q.Messages() {
		if m.ReceiveCount != 0 {
			t.Fatalf("%s at receive count %d outside the window, want 0", m.ID, m.ReceiveCount)
		}
	}
	if s := gate.Status().String(); s != "outside posting window until 2025-03-17 06:00 IST" {
		t.Errorf("status %q", s)
	}

	clock.Set(time.Date(2025, 3, 17, 6, 0, 0, 0, kolkata)) // Monday's opening
	consumertest.WaitFor(t, "every charge handled", func() bool { return q.Len() == 0 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1000 {
		t.Errorf("%d charges handled, want 1000", len(handled))
	}
	for body, n := range handled {
		if n != 1 {
			t.Errorf("%s handled %d times", body, n)
		}
	}
	if counts[1] != 1000 || len(counts) != 1 {
		t.Errorf("receive counts at the handler %v, want all 1000 at 1", counts)
	}
	if dlq.Len() != 0 {
		t.Errorf("%d dead-lettered", dlq.Len())
	}
}

// The gate is asked before a receive, and a receive long-polls (SQS: 20
// seconds): one that begins while the window is open returns what arrives
// after it closed, and the handler debits it outside the window (after the
// bank's cut-off). A message received once the calendar is closed must
// not reach the handler: it waits for the window, and is handled then at
// receive count 2 at most.
func TestAttackALongPollAcrossTheCloseIsNotHandledOutsideTheWindow(t *testing.T) {
	cal, err := calendar.Parse("Mon-Fri 06:00-20:00 Asia/Kolkata", calendar.Holidays{})
	if err != nil {
		t.Fatal(err)
	}
	kolkata := cal.Windows()[0].Loc
	clock := newFakeClock(time.Date(2025, 3, 17, 19, 59, 55, 0, kolkata)) // Monday, open
	gate := calendar.NewGate(cal, clock)
	dlq := memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Minute, WaitTime: 5 * time.Second, DLQ: dlq})

	var mu sync.Mutex
	var outside, handled []int // receive counts
	rt := consumertest.New(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		mu.Lock()
		defer mu.Unlock()
		if !cal.Open(clock.Now()) {
			outside = append(outside, d.ReceiveCount)
		}
		handled = append(handled, d.ReceiveCount)
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 1, Receivers: 1, Gate: gate, Logger: slog.New(slog.DiscardHandler), AckFlushInterval: 5 * time.Millisecond})
	stop := consumertest.Start(t, rt)
	defer stop()
	consumertest.WaitFor(t, "a receive under way", func() bool { return q.Counts().Receives >= 1 })
	clock.Set(time.Date(2025, 3, 17, 20, 0, 5, 0, kolkata)) // the window closed at 20:00
	if _, err := q.Send(t.Context(), []byte("CHG-AFTER-CUTOFF"), nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	if len(outside) != 0 {
		mu.Unlock()
		t.Fatalf("handled outside the posting window (at receive counts %v): the long poll began at 19:59:55 and returned a message sent at 20:00:05", outside)
	}
	mu.Unlock()
	clock.Set(time.Date(2025, 3, 18, 6, 0, 0, 0, kolkata)) // Tuesday's opening
	consumertest.WaitFor(t, "the charge handled", func() bool { return q.Len() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1 || handled[0] > 2 {
		t.Fatalf("handled at receive counts %v, want once, at 2 at most", handled)
	}
}
