package calendar

import (
	"context"
	"time"
)

// Clock is the gate's time. Tests inject a fake that moves by hand.
type Clock interface {
	Now() time.Time
	// After delivers on the channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Recheck is the longest a closed gate sleeps before it looks at the clock
// again: the wall clock may be stepped, which a timer does not see.
const Recheck = time.Minute

// Gate holds a consumer's receiving back while the calendar is closed: it
// has the methods of consumer.Gate (Wait, Paused), so that outside the
// posting windows no message is received (none burns a receive count)
// and receiving resumes when a window opens.
type Gate struct {
	cal   *Calendar
	clock Clock
}

// NewGate is a gate over c on clock (nil: the wall clock).
func NewGate(c *Calendar, clock Clock) *Gate {
	if clock == nil {
		clock = wallClock{}
	}
	return &Gate{cal: c, clock: clock}
}

// Wait blocks while the calendar is closed, until a window opens or ctx
// ends (then it returns ctx's error). It never puts the dependency on
// trial: trial is always false.
func (g *Gate) Wait(ctx context.Context) (trial bool, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		now := g.clock.Now()
		if g.cal.Open(now) {
			return false, nil
		}
		sleep := Recheck
		if next, err := g.cal.NextOpen(now); err == nil {
			sleep = min(max(next.Sub(now), time.Millisecond), Recheck)
		}
		select {
		case <-g.clock.After(sleep):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// Shut reports whether the calendar is closed now (consumer.Shutter): a
// receive that long-polled across the close hands its messages back.
func (g *Gate) Shut() bool { return !g.cal.Open(g.clock.Now()) }

// Paused reports whether the calendar is closed now.
func (g *Gate) Paused() bool { return !g.cal.Open(g.clock.Now()) }

// Status is the calendar's status now ("outside posting window until T").
func (g *Gate) Status() Status { return g.cal.Status(g.clock.Now()) }

// Calendar is the gate's calendar.
func (g *Gate) Calendar() *Calendar { return g.cal }
