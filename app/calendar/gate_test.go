package calendar_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/calendar"
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
