// Package calendar is the bank's processing calendar: posting windows
// ("Mon-Fri 06:00-20:00 Asia/Kolkata; Sat 06:00-13:00 Asia/Kolkata") and
// the holidays on which no window opens. It answers whether debits may be
// posted at an instant (Open), when they next may (NextOpen), when the
// current stretch ends (ClosesAt), and says so in words for a status page
// (Status). Gate holds a consumer's receiving back while the calendar is
// closed (it has consumer.Gate's methods). Standard library only.
//
// # Time of day, time zones and daylight saving
//
// A window is its hours on the local dates of its time zone (an IANA name,
// loaded with time.LoadLocation: a binary should import time/tzdata). On a
// local date D whose weekday it lists and which is not a holiday, it opens
// at the first instant the zone's clock reads its opening time or later on
// D, and closes at the first instant it reads its closing time or later
// (24:00 is the start of the next day). So on a day the clocks go forward
// through the opening time, the window opens when they jump (Europe/London
// on its spring-forward day: 01:30-03:00 opens at 02:00 BST, which is
// 01:00 UTC, and lasts an hour); on a day they go back through it, at the
// first of the two readings. Every window is one stretch of time on its
// day: a window across midnight is refused (split it at midnight instead).
package calendar

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Horizon is how far ahead NextOpen and ClosesAt look, in days.
const Horizon = 400

// ErrNeverOpens: no window opens within Horizon days (every listed day is
// a holiday, say).
var ErrNeverOpens = errors.New("calendar: no posting window opens within 400 days")

// Date is a day of the calendar, in no time zone.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf is the date t reads in its own location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{y, m, d}
}

func (d Date) midnight() time.Time { return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC) }

// AddDays is the date n days after d (before, for n < 0).
func (d Date) AddDays(n int) Date { return DateOf(d.midnight().AddDate(0, 0, n)) }

// Weekday is d's day of the week.
func (d Date) Weekday() time.Weekday { return d.midnight().Weekday() }

// String is d as YYYY-MM-DD.
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day) }

// Window is one posting window: its hours on the listed days, in Loc.
type Window struct {
	// Days are the days of the week it opens on, by time.Weekday.
	Days [7]bool
	// Start and End are its hours, as times after local midnight:
	// 0 <= Start < End <= 24h, whole minutes.
	Start, End time.Duration
	// Loc is its time zone.
	Loc *time.Location
}

func (w Window) check() error {
	some := false
	for _, d := range w.Days {
		some = some || d
	}
	switch {
	case w.Loc == nil:
		return errors.New("no time zone")
	case !some:
		return errors.New("no day")
	case w.Start < 0 || w.End > 24*time.Hour || w.Start%time.Minute != 0 || w.End%time.Minute != 0:
		return fmt.Errorf("hours %s-%s outside 00:00-24:00 or not whole minutes", clock(w.Start), clock(w.End))
	case w.Start >= w.End:
		return fmt.Errorf("hours %s-%s do not close after they open", clock(w.Start), clock(w.End))
	}
	return nil
}

// String is w as the spec writes it ("Mon-Fri 06:00-20:00 Asia/Kolkata").
func (w Window) String() string {
	loc := "UTC"
	if w.Loc != nil {
		loc = w.Loc.String()
	}
	return days(w.Days) + " " + clock(w.Start) + "-" + clock(w.End) + " " + loc
}

// on is w's stretch on local date d: ok false when it does not open then
// (not one of its days, a holiday, or a date whose clock never reads its
// opening time: a zone that skipped the day).
func (w Window) on(d Date, h Holidays) (opens, closes time.Time, ok bool) {
	if !w.Days[d.Weekday()] || h.Has(d) {
		return time.Time{}, time.Time{}, false
	}
	opens = firstReading(d.midnight().Add(w.Start), w.Loc)
	if DateOf(opens) != d {
		return time.Time{}, time.Time{}, false
	}
	closes = firstReading(d.midnight().Add(w.End), w.Loc)
	return opens, closes, opens.Before(closes)
}

// firstReading is the first instant at which the clock of loc reads wall
// (a wall-clock reading, written as a UTC time) or later: wall itself
// where the clock reads it once, the end of the jump where the clocks go
// forward over it, the first of the two where they go back over it.
func firstReading(wall time.Time, loc *time.Location) time.Time {
	w := wall.Unix()
	// No zone is more than 26 hours ahead: a clock read at w - 30h is
	// behind w. Walk the zone's periods (a fixed offset each) from there.
	t := time.Unix(w-30*3600, 0).In(loc)
	for range 16 {
		_, off := t.Zone()
		_, end := t.ZoneBounds()
		// Within the period the clock reads u + off at instant u.
		u := max(w-int64(off), t.Unix())
		if end.IsZero() || u < end.Unix() {
			return time.Unix(u, 0).In(loc)
		}
		t = end.In(loc)
	}
	return time.Unix(w, 0).In(loc) // unreachable with real zone data
}

// Calendar is posting windows and holidays. Safe for concurrent use.
type Calendar struct {
	windows  []Window
	holidays Holidays
}

// New returns the calendar of windows (at least one) closed on holidays.
func New(windows []Window, holidays Holidays) (*Calendar, error) {
	if len(windows) == 0 {
		return nil, fmt.Errorf("%w: no posting window", ErrBadSpec)
	}
	for i, w := range windows {
		if err := w.check(); err != nil {
			return nil, fmt.Errorf("%w: window %d: %v", ErrBadSpec, i+1, err)
		}
	}
	return &Calendar{windows: append([]Window(nil), windows...), holidays: holidays}, nil
}

// Parse is New over ParseWindows(spec).
func Parse(spec string, holidays Holidays) (*Calendar, error) {
	ws, err := ParseWindows(spec)
	if err != nil {
		return nil, err
	}
	return New(ws, holidays)
}

// Windows returns the calendar's windows.
func (c *Calendar) Windows() []Window { return append([]Window(nil), c.windows...) }

// Holidays returns the calendar's holidays.
func (c *Calendar) Holidays() Holidays { return c.holidays }

// String is the windows as a spec.
func (c *Calendar) String() string {
	parts := make([]string, len(c.windows))
	for i, w := range c.windows {
		parts[i] = w.String()
	}
	return strings.Join(parts, "; ")
}

// containing is the latest close of the stretches containing t, if any
// does.
func (c *Calendar) containing(t time.Time) (closes time.Time, ok bool) {
	for _, w := range c.windows {
		d := DateOf(t.In(w.Loc))
		// A clock that goes back over midnight reads yesterday's date
		// again: look at the days either side.
		for i := -1; i <= 1; i++ {
			o, cl, open := w.on(d.AddDays(i), c.holidays)
			if open && !t.Before(o) && t.Before(cl) && (!ok || cl.After(closes)) {
				closes, ok = cl, true
			}
		}
	}
	return closes, ok
}

// Open reports whether a window is open at t.
func (c *Calendar) Open(t time.Time) bool {
	_, ok := c.containing(t)
	return ok
}

// NextOpen is t when a window is open at t, else the next instant one
// opens (in that window's zone); ErrNeverOpens when none does within
// Horizon days.
func (c *Calendar) NextOpen(t time.Time) (time.Time, error) {
	if c.Open(t) {
		return t, nil
	}
	var best time.Time
	for _, w := range c.windows {
		d := DateOf(t.In(w.Loc)).AddDays(-1)
		for i := range Horizon + 2 {
			o, _, ok := w.on(d.AddDays(i), c.holidays)
			if !ok || o.Before(t) {
				continue
			}
			if best.IsZero() || o.Before(best) {
				best = o
			}
			break
		}
	}
	if best.IsZero() {
		return time.Time{}, fmt.Errorf("%w (from %s)", ErrNeverOpens, t.Format(time.RFC3339))
	}
	return best, nil
}

// ClosesAt is when the open stretch containing t ends (windows that touch
// or overlap are one stretch), in the zone of the window that closes it;
// ok is false when the calendar is closed at t. A calendar that does not
// close within Horizon days of t gives the zero time with ok true.
func (c *Calendar) ClosesAt(t time.Time) (closes time.Time, ok bool) {
	end, ok := c.containing(t)
	if !ok {
		return time.Time{}, false
	}
	limit := t.AddDate(0, 0, Horizon)
	for end.Before(limit) {
		next, more := c.containing(end)
		if !more {
			return end, true
		}
		end = next
	}
	return time.Time{}, true
}

// LongestClosure is the longest stretch the calendar is closed that
// begins within days of from (one closed at from counts from from): its
// start and its end, the next opening. ErrNeverOpens, with that stretch's
// start, when one of them does not end within Horizon days. ok is false
// when the calendar does not close in that time.
//
// What is received only while the calendar is open waits on its queue for
// the whole closure: a queue whose messages expire sooner loses them.
func (c *Calendar) LongestClosure(from time.Time, days int) (start, end time.Time, ok bool, err error) {
	limit := from.AddDate(0, 0, days)
	for t := from; t.Before(limit); {
		if c.Open(t) {
			closes, _ := c.ClosesAt(t)
			if closes.IsZero() {
				return start, end, ok, nil // open to the horizon
			}
			t = closes
			continue
		}
		opens, err := c.NextOpen(t)
		if err != nil {
			return t, time.Time{}, true, err
		}
		if !ok || opens.Sub(t) > end.Sub(start) {
			start, end, ok = t, opens, true
		}
		t = opens
	}
	return start, end, ok, nil
}

// Status is whether the calendar is open at an instant, and until when.
type Status struct {
	Open bool
	// Until is when it closes (Open) or next opens; zero when that is
	// not within Horizon days.
	Until time.Time
}

// Status is the calendar at now.
func (c *Calendar) Status(now time.Time) Status {
	if until, ok := c.ClosesAt(now); ok {
		return Status{Open: true, Until: until}
	}
	until, _ := c.NextOpen(now)
	return Status{Until: until}
}

// String is the status for a status page or /readyz: "open until T" or
// "outside posting window until T", T in the window's zone.
func (s Status) String() string {
	const layout = "2006-01-02 15:04 MST"
	switch {
	case s.Open && s.Until.IsZero():
		return "open (no closing within 400 days)"
	case s.Open:
		return "open until " + s.Until.Format(layout)
	case s.Until.IsZero():
		return "outside posting window (no window opens within 400 days)"
	}
	return "outside posting window until " + s.Until.Format(layout)
}
