package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/finedge/idempotent-consumer/app/calendar"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/memqueue"
)

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
	clock := &handClock{now: time.Date(2025, 3, 17, 19, 59, 55, 0, kolkata), armed: make(chan struct{}, 1)} // Monday, open
	gate := calendar.NewGate(cal, clock)
	dlq := memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Minute, WaitTime: 5 * time.Second, DLQ: dlq})

	var mu sync.Mutex
	var outside, handled []int // receive counts
	rt := newRuntime(t, q, consumer.HandlerFunc(func(_ context.Context, d *consumer.Delivery) consumer.Decision {
		mu.Lock()
		defer mu.Unlock()
		if !cal.Open(clock.Now()) {
			outside = append(outside, d.ReceiveCount)
		}
		handled = append(handled, d.ReceiveCount)
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 1, Receivers: 1, Gate: gate, Logger: quiet, AckFlushInterval: 5 * time.Millisecond})
	stop := start(t, rt)
	defer stop()
	waitFor(t, "a receive under way", func() bool { return q.Counts().Receives >= 1 })
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
	waitFor(t, "the charge handled", func() bool { return q.Len() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1 || handled[0] > 2 {
		t.Fatalf("handled at receive counts %v, want once, at 2 at most", handled)
	}
}
