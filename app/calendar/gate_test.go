package calendar_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/finedge/idempotent-consumer/app/calendar"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/consumer/consumertest"
	"github.com/finedge/idempotent-consumer/memqueue"
)

// fakeClock moves only when told; After's channels fire as it passes them,
// and every After is announced on armed with its duration (the first 100
// not yet read).
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeTimer
	armed   chan time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, armed: make(chan time.Duration, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeTimer{c.now.Add(d), ch})
	select {
	case c.armed <- d:
	default:
	}
	return ch
}

// Set moves the clock to t and fires every timer due by then.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- t
	}
	c.waiters = kept
}

func (c *fakeClock) nextArmed(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.armed:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the gate set no timer")
		return 0
	}
}

// The gate over a closed calendar blocks, sleeping until the window opens
// (never more than a minute at a time), reports paused, says until when,
// and lets receiving go on at the opening.
func TestTheGateWaitsForTheWindow(t *testing.T) {
	cal := mustCal(t, kolkata, kolkataHolidays)
	clock := newFakeClock(at(t, "2025-03-13T21:00:00+05:30")) // Thursday evening; Friday is Holi
	g := calendar.NewGate(cal, clock)
	if !g.Paused() {
		t.Fatal("not paused outside the window")
	}
	if s := g.Status().String(); s != "outside posting window until 2025-03-15 06:00 IST" {
		t.Errorf("status %q", s)
	}
	type result struct {
		trial bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		trial, err := g.Wait(t.Context())
		done <- result{trial, err}
	}()
	if d := clock.nextArmed(t); d != calendar.Recheck {
		t.Errorf("slept %s, want %s at most", d, calendar.Recheck)
	}
	clock.Set(at(t, "2025-03-15T05:59:30+05:30")) // past the first sleep, still closed
	if d := clock.nextArmed(t); d != 30*time.Second {
		t.Errorf("slept %s, want the 30s to the opening", d)
	}
	select {
	case r := <-done:
		t.Fatalf("Wait returned %+v before the window opened", r)
	default:
	}
	clock.Set(at(t, "2025-03-15T06:00:00+05:30"))
	select {
	case r := <-done:
		if r.trial || r.err != nil {
			t.Fatalf("Wait = %+v, want no trial and no error", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return when the window opened")
	}
	if g.Paused() {
		t.Error("paused inside the window")
	}
	if s := g.Status().String(); s != "open until 2025-03-15 13:00 IST" {
		t.Errorf("status %q", s)
	}
	// Open: Wait returns at once, without a timer.
	if trial, err := g.Wait(t.Context()); trial || err != nil {
		t.Fatalf("Wait while open = %v, %v", trial, err)
	}
	select {
	case d := <-clock.armed:
		t.Errorf("a timer of %s while open", d)
	default:
	}
}

func TestTheGateStopsWaitingWithItsContext(t *testing.T) {
	cal := mustCal(t, kolkata, kolkataHolidays)
	clock := newFakeClock(at(t, "2025-03-16T09:00:00+05:30")) // Sunday
	g := calendar.NewGate(cal, clock)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := g.Wait(ctx); done <- err }()
	clock.nextArmed(t)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return when its context ended")
	}
}

// A calendar that never opens keeps the gate shut, looking again every
// Recheck.
func TestTheGateOfACalendarThatNeverOpens(t *testing.T) {
	cal := mustCal(t, "Mon 06:00-20:00 UTC", "")
	never, err := calendar.New(cal.Windows(), holidaysEveryMonday(t))
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock(at(t, "2025-03-04T00:00:00Z"))
	g := calendar.NewGate(never, clock)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := g.Wait(ctx); done <- err }()
	for i := range 3 {
		if d := clock.nextArmed(t); d != calendar.Recheck {
			t.Fatalf("sleep %d: %s, want %s", i, d, calendar.Recheck)
		}
		clock.Set(clock.Now().Add(calendar.Recheck))
	}
	clock.nextArmed(t)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v", err)
	}
}

func holidaysEveryMonday(t *testing.T) calendar.Holidays {
	t.Helper()
	var b strings.Builder
	for d := time.Date(2025, 3, 3, 0, 0, 0, 0, time.UTC); d.Year() < 2027; d = d.AddDate(0, 0, 7) {
		b.WriteString(d.Format(time.DateOnly) + "\n")
	}
	h, err := calendar.ParseHolidays(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// On the wall clock (no clock given), an open calendar lets through at
// once.
func TestTheGateOnTheWallClock(t *testing.T) {
	g := calendar.NewGate(mustCal(t, "Mon-Sun 00:00-24:00 UTC", ""), nil)
	if trial, err := g.Wait(t.Context()); trial || err != nil || g.Paused() {
		t.Fatalf("Wait = %v, %v; paused %v", trial, err, g.Paused())
	}
}

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
