package calendar_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/finedge/idempotent-consumer/app/calendar"
)

func mustCal(t *testing.T, spec, holidays string) *calendar.Calendar {
	t.Helper()
	h, err := calendar.ParseHolidays(strings.NewReader(holidays))
	if err != nil {
		t.Fatal(err)
	}
	c, err := calendar.Parse(spec, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const (
	kolkata         = "Mon-Fri 06:00-20:00 Asia/Kolkata; Sat 06:00-13:00 Asia/Kolkata"
	kolkataHolidays = "2025-03-14 Holi\n2025-08-15 Independence Day\n"
)

// Open, NextOpen and ClosesAt across evenings, weekends, holidays, zones
// and daylight saving: each instant in RFC 3339, answers compared as
// instants.
func TestNextOpenAndClosesAt(t *testing.T) {
	for _, c := range []struct {
		name, spec, holidays, from string
		open                       bool
		next, closes               string // closes: of the stretch open at next; "" never
	}{
		{"inside a window", kolkata, kolkataHolidays, "2025-03-12T10:00:00+05:30", true, "2025-03-12T10:00:00+05:30", "2025-03-12T20:00:00+05:30"},
		{"at the opening", kolkata, kolkataHolidays, "2025-03-12T06:00:00+05:30", true, "2025-03-12T06:00:00+05:30", "2025-03-12T20:00:00+05:30"},
		{"a second before it", kolkata, kolkataHolidays, "2025-03-12T05:59:59+05:30", false, "2025-03-12T06:00:00+05:30", "2025-03-12T20:00:00+05:30"},
		{"at the cut-off (closed)", kolkata, kolkataHolidays, "2025-03-12T20:00:00+05:30", false, "2025-03-13T06:00:00+05:30", "2025-03-13T20:00:00+05:30"},
		{"asked in UTC", kolkata, kolkataHolidays, "2025-03-12T00:29:59Z", false, "2025-03-12T00:30:00Z", "2025-03-12T14:30:00Z"},
		{"Thursday evening, Friday a holiday", kolkata, kolkataHolidays, "2025-03-13T21:00:00+05:30", false, "2025-03-15T06:00:00+05:30", "2025-03-15T13:00:00+05:30"},
		{"on the holiday", kolkata, kolkataHolidays, "2025-03-14T10:00:00+05:30", false, "2025-03-15T06:00:00+05:30", "2025-03-15T13:00:00+05:30"},
		{"same day without the holiday", kolkata, "", "2025-03-14T10:00:00+05:30", true, "2025-03-14T10:00:00+05:30", "2025-03-14T20:00:00+05:30"},
		{"Saturday morning", kolkata, kolkataHolidays, "2025-03-15T12:00:00+05:30", true, "2025-03-15T12:00:00+05:30", "2025-03-15T13:00:00+05:30"},
		{"Saturday after the half day", kolkata, kolkataHolidays, "2025-03-15T13:30:00+05:30", false, "2025-03-17T06:00:00+05:30", "2025-03-17T20:00:00+05:30"},
		{"Sunday", kolkata, kolkataHolidays, "2025-03-16T09:00:00+05:30", false, "2025-03-17T06:00:00+05:30", "2025-03-17T20:00:00+05:30"},
		{"holiday on a Friday before a weekend", "Mon-Fri 09:00-17:00 Europe/London", "2025-04-18 Good Friday\n2025-04-21 Easter Monday\n",
			"2025-04-17T18:00:00+01:00", false, "2025-04-22T09:00:00+01:00", "2025-04-22T17:00:00+01:00"},
		// Daylight saving: Europe/London springs forward 2025-03-30 at
		// 01:00 GMT to 02:00 BST, and falls back 2025-10-26 at 02:00 BST
		// to 01:00 GMT.
		{"London spring forward: opens when the clocks jump", "Sun 01:30-03:00 Europe/London", "", "2025-03-29T12:00:00Z", false,
			"2025-03-30T01:00:00Z", "2025-03-30T02:00:00Z"},
		{"London spring forward: open after the jump", "Sun 01:30-03:00 Europe/London", "", "2025-03-30T01:30:00Z", true,
			"2025-03-30T01:30:00Z", "2025-03-30T02:00:00Z"},
		{"London fall back: opens at the first 01:30", "Sun 01:30-03:00 Europe/London", "", "2025-10-25T12:00:00Z", false,
			"2025-10-26T00:30:00Z", "2025-10-26T03:00:00Z"},
		{"London fall back: still open in the repeated hour", "Sun 01:30-03:00 Europe/London", "", "2025-10-26T01:15:00Z", true,
			"2025-10-26T01:15:00Z", "2025-10-26T03:00:00Z"},
		{"London: business hours move with the clocks", "Mon-Fri 09:00-17:00 Europe/London", "", "2025-03-28T17:30:00Z", false,
			"2025-03-31T08:00:00Z", "2025-03-31T16:00:00Z"},
		// America/New_York springs forward 2025-03-09 at 02:00 EST to
		// 03:00 EDT, and falls back 2025-11-02 at 02:00 EDT to 01:00 EST.
		{"New York spring forward: closes when the clocks jump past 03:00", "Sun 01:30-03:00 America/New_York", "", "2025-03-08T12:00:00Z", false,
			"2025-03-09T06:30:00Z", "2025-03-09T07:00:00Z"},
		{"New York spring forward: an opening in the gap", "Sun 02:30-03:30 America/New_York", "", "2025-03-08T12:00:00Z", false,
			"2025-03-09T07:00:00Z", "2025-03-09T07:30:00Z"},
		{"New York fall back", "Sun 01:30-03:00 America/New_York", "", "2025-11-01T12:00:00Z", false,
			"2025-11-02T05:30:00Z", "2025-11-02T08:00:00Z"},
		{"New York: Monday opens at 06:00 EDT, not EST", "Mon-Fri 06:00-20:00 America/New_York", "", "2025-03-07T21:00:00-05:00", false,
			"2025-03-10T06:00:00-04:00", "2025-03-10T20:00:00-04:00"},
		// Several zones, windows that touch, all day.
		{"two zones: New York still open after London", "Mon-Fri 09:00-17:00 Europe/London; Mon-Fri 09:00-17:00 America/New_York", "",
			"2025-03-03T18:00:00Z", true, "2025-03-03T18:00:00Z", "2025-03-03T22:00:00Z"},
		{"two zones: London opens first", "Mon-Fri 09:00-17:00 Europe/London; Mon-Fri 09:00-17:00 America/New_York", "",
			"2025-03-03T23:00:00Z", false, "2025-03-04T09:00:00Z", "2025-03-04T22:00:00Z"},
		{"windows that touch are one stretch", "Mon-Fri 06:00-12:00 UTC; Mon-Fri 12:00-20:00 UTC", "", "2025-03-03T10:00:00Z", true,
			"2025-03-03T10:00:00Z", "2025-03-03T20:00:00Z"},
		{"all day Monday to Friday closes at Saturday's midnight", "Mon-Fri 00:00-24:00 UTC", "", "2025-03-05T10:00:00Z", true,
			"2025-03-05T10:00:00Z", "2025-03-08T00:00:00Z"},
		{"always open never closes", "Mon-Sun 00:00-24:00 UTC", "", "2025-03-05T10:00:00Z", true, "2025-03-05T10:00:00Z", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cal := mustCal(t, c.spec, c.holidays)
			from := at(t, c.from)
			if got := cal.Open(from); got != c.open {
				t.Errorf("Open(%s) = %v, want %v", c.from, got, c.open)
			}
			next, err := cal.NextOpen(from)
			if err != nil {
				t.Fatal(err)
			}
			if want := at(t, c.next); !next.Equal(want) {
				t.Errorf("NextOpen(%s) = %s, want %s", c.from, next.Format(time.RFC3339), c.next)
			}
			if !cal.Open(next) {
				t.Errorf("not open at its NextOpen %s", next.Format(time.RFC3339))
			}
			if !c.open && cal.Open(next.Add(-time.Second)) {
				t.Errorf("already open a second before NextOpen %s", next.Format(time.RFC3339))
			}
			closes, ok := cal.ClosesAt(next)
			switch {
			case !ok:
				t.Errorf("ClosesAt(%s): closed", next.Format(time.RFC3339))
			case c.closes == "" && !closes.IsZero():
				t.Errorf("ClosesAt(%s) = %s, want never", next.Format(time.RFC3339), closes.Format(time.RFC3339))
			case c.closes != "" && !closes.Equal(at(t, c.closes)):
				t.Errorf("ClosesAt(%s) = %s, want %s", next.Format(time.RFC3339), closes.Format(time.RFC3339), c.closes)
			case c.closes != "" && (cal.Open(closes) || !cal.Open(closes.Add(-time.Second))):
				t.Errorf("the stretch does not end at %s", closes.Format(time.RFC3339))
			}
		})
	}
}

// Every five minutes of a year in London, New York and Kolkata (a
// holiday, two changes of the clocks in the first two; every opening and
// closing falls on a multiple of five minutes): Open agrees with a plain
// reading of the local clock, and NextOpen from the instants before an
// opening is that opening.
func TestOpenMatchesTheLocalClockAllYear(t *testing.T) {
	for _, zone := range []string{"Europe/London", "America/New_York", "Asia/Kolkata"} {
		cal := mustCal(t, "Mon-Fri 06:00-20:00 "+zone+"; Sat 06:00-13:00 "+zone, "2025-12-25\n")
		loc := cal.Windows()[0].Loc
		start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		var pending []time.Time // closed instants since the last open one
		for m := start; m.Before(start.AddDate(1, 0, 0)); m = m.Add(5 * time.Minute) {
			l := m.In(loc)
			hm := l.Hour()*60 + l.Minute()
			want := l.Month() != 12 || l.Day() != 25
			switch l.Weekday() {
			case time.Sunday:
				want = false
			case time.Saturday:
				want = want && hm >= 6*60 && hm < 13*60
			default:
				want = want && hm >= 6*60 && hm < 20*60
			}
			if got := cal.Open(m); got != want {
				t.Fatalf("%s: Open(%s) = %v, the local clock %s says %v", zone, m.Format(time.RFC3339), got, l.Format("Mon 15:04 MST"), want)
			}
			if !want {
				pending = append(pending, m)
				continue
			}
			checks := slices.Concat(pending[:min(len(pending), 2)], pending[max(0, len(pending)-3):]) // the first and the last few
			for _, p := range checks {
				if next, err := cal.NextOpen(p); err != nil || !next.Equal(m) {
					t.Fatalf("%s: NextOpen(%s) = %s, %v; want %s", zone, p.Format(time.RFC3339), next.Format(time.RFC3339), err, m.Format(time.RFC3339))
				}
			}
			pending = pending[:0]
		}
	}
}

func TestACalendarThatNeverOpens(t *testing.T) {
	cal, err := calendar.New(mustCal(t, "Mon 06:00-20:00 UTC", "").Windows(), holidaysEveryMonday(t))
	if err != nil {
		t.Fatal(err)
	}
	from := at(t, "2025-03-01T00:00:00Z")
	if _, err := cal.NextOpen(from); !errors.Is(err, calendar.ErrNeverOpens) {
		t.Fatalf("NextOpen: %v, want ErrNeverOpens", err)
	}
	if s := cal.Status(from).String(); s != "outside posting window (no window opens within 400 days)" {
		t.Errorf("status %q", s)
	}
}

func TestStatusSaysUntilWhen(t *testing.T) {
	cal := mustCal(t, kolkata, kolkataHolidays)
	for from, want := range map[string]string{
		"2025-03-12T10:00:00+05:30": "open until 2025-03-12 20:00 IST",
		"2025-03-13T21:00:00+05:30": "outside posting window until 2025-03-15 06:00 IST",
		"2025-03-15T12:00:00Z":      "outside posting window until 2025-03-17 06:00 IST",
	} {
		s := cal.Status(at(t, from))
		if s.String() != want {
			t.Errorf("Status(%s) = %q, want %q", from, s, want)
		}
	}
	always := mustCal(t, "Mon-Sun 00:00-24:00 UTC", "")
	if s := always.Status(at(t, "2025-03-12T10:00:00Z")); !s.Open || s.String() != "open (no closing within 400 days)" {
		t.Errorf("always open: %+v %q", s, s)
	}
}

// LongestClosure finds the longest closed stretch ahead: a weekend, a
// weekend with holidays beside it, none for a calendar always open.
func TestLongestClosure(t *testing.T) {
	for _, c := range []struct {
		name, spec, holidays, from string
		days                       int
		start, end                 string // "" none
	}{
		{"a weekend", "Mon-Fri 06:00-20:00 UTC", "", "2025-03-10T10:00:00Z", 10, "2025-03-14T20:00:00Z", "2025-03-17T06:00:00Z"},
		{"a weekend and two holidays", "Mon-Fri 06:00-20:00 UTC", "2025-03-17 a\n2025-03-18 b\n", "2025-03-10T10:00:00Z", 10, "2025-03-14T20:00:00Z", "2025-03-19T06:00:00Z"},
		{"closed from the start", "Mon-Fri 06:00-20:00 UTC", "", "2025-03-15T10:00:00Z", 2, "2025-03-15T10:00:00Z", "2025-03-17T06:00:00Z"},
		{"Kolkata: Holi on a Friday, then the Saturday half day", kolkata, kolkataHolidays, "2025-03-10T10:00:00+05:30", 7, "2025-03-15T13:00:00+05:30", "2025-03-17T06:00:00+05:30"},
		{"always open", "Mon-Sun 00:00-24:00 UTC", "", "2025-03-10T10:00:00Z", 10, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			start, end, ok, err := mustCal(t, c.spec, c.holidays).LongestClosure(at(t, c.from), c.days)
			if err != nil {
				t.Fatal(err)
			}
			if c.start == "" {
				if ok {
					t.Fatalf("closed %s to %s, want never", start, end)
				}
				return
			}
			if !ok || !start.Equal(at(t, c.start)) || !end.Equal(at(t, c.end)) {
				t.Fatalf("longest closure %s to %s (%v), want %s to %s", start, end, ok, c.start, c.end)
			}
		})
	}
	if _, _, _, err := mustCal(t, "Mon 06:00-20:00 UTC", "").LongestClosure(at(t, "2025-03-10T10:00:00Z"), 30); err != nil {
		t.Fatal(err)
	}
}

func TestParseWindows(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"Mon-Fri 06:00-20:00 Asia/Kolkata", "Mon-Fri 06:00-20:00 Asia/Kolkata"},
		{"Mon-Fri 06:00-20:00 Asia/Kolkata; Sat 06:00-13:00 Asia/Kolkata", "Mon-Fri 06:00-20:00 Asia/Kolkata; Sat 06:00-13:00 Asia/Kolkata"},
		{"mon,wed,FRI 09:30-16:00 Europe/London", "Mon,Wed,Fri 09:30-16:00 Europe/London"},
		{"Monday-Wednesday,Friday 6:00-20:00 UTC;", "Mon-Wed,Fri 06:00-20:00 UTC"},
		{"Fri-Mon 00:00-24:00 UTC", "Mon,Fri-Sun 00:00-24:00 UTC"},
		{"Sun-Sat 00:00-24:00 UTC", "Mon-Sun 00:00-24:00 UTC"},
		{"Sat,Sat 06:00-13:00 America/New_York", "Sat 06:00-13:00 America/New_York"},
		{"  Sat   06:00-13:00\tAsia/Kolkata ;  Mon 07:00-08:00 UTC ", "Sat 06:00-13:00 Asia/Kolkata; Mon 07:00-08:00 UTC"},
	} {
		cal, err := calendar.Parse(c.spec, calendar.Holidays{})
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if got := cal.String(); got != c.want {
			t.Errorf("%q reads as %q, want %q", c.spec, got, c.want)
		}
	}
}

func TestParseWindowsSaysWhatToFix(t *testing.T) {
	const pre = "calendar: bad posting windows: "
	for _, c := range []struct{ spec, want string }{
		{"", `none given (e.g. "Mon-Fri 06:00-20:00 Asia/Kolkata")`},
		{"  ", `none given (e.g. "Mon-Fri 06:00-20:00 Asia/Kolkata")`},
		{"Mon-Fri 06:00-20:00 UTC;; Sat 06:00-13:00 UTC", `window 2 is empty (two ";" in a row?)`},
		{"Mon-Fri 22:00-02:00 Asia/Kolkata",
			`window 1 "Mon-Fri 22:00-02:00 Asia/Kolkata": 22:00-02:00 crosses midnight, which is not supported: split it at midnight, as "Mon-Fri 22:00-24:00 Asia/Kolkata; Tue-Sat 00:00-02:00 Asia/Kolkata"`},
		{"Sat,Sun 23:00-01:00 UTC",
			`window 1 "Sat,Sun 23:00-01:00 UTC": 23:00-01:00 crosses midnight, which is not supported: split it at midnight, as "Sat-Sun 23:00-24:00 UTC; Mon,Sun 00:00-01:00 UTC"`},
		{"Mon-Fri 06:00-06:00 UTC", `window 1 "Mon-Fri 06:00-06:00 UTC": 06:00-06:00 is empty: a window closes after it opens (all day is 00:00-24:00)`},
		{"Mon-Fri 00:00-00:00 UTC", `window 1 "Mon-Fri 00:00-00:00 UTC": 00:00-00:00 is empty: a window closes after it opens (all day is 00:00-24:00)`},
		{"Mon-Fri 06:00-20:00", `window 1 "Mon-Fri 06:00-20:00": no time zone: add an IANA name such as Asia/Kolkata or UTC after the hours`},
		{"Mon-Fri 06:00-20:00 UTC; Sat 06:00-13:00", `window 2 "Sat 06:00-13:00": no time zone: add an IANA name such as Asia/Kolkata or UTC after the hours`},
		{"06:00-20:00 Mon-Fri UTC", `window 1 "06:00-20:00 Mon-Fri UTC": the days come first: want DAYS HH:MM-HH:MM ZONE, e.g. "Mon-Fri 06:00-20:00 Asia/Kolkata"`},
		{"Mon-Fri", `window 1 "Mon-Fri": want DAYS HH:MM-HH:MM ZONE, e.g. "Mon-Fri 06:00-20:00 Asia/Kolkata"`},
		{"Mon, Wed 06:00-20:00 UTC", `window 1 "Mon, Wed 06:00-20:00 UTC": too many fields: write the days without spaces (Mon,Wed,Fri) and one zone; want DAYS HH:MM-HH:MM ZONE, e.g. "Mon-Fri 06:00-20:00 Asia/Kolkata"`},
		{"Mon-Fry 06:00-20:00 UTC", `window 1 "Mon-Fry 06:00-20:00 UTC": unknown day "Fry" (days are Mon Tue Wed Thu Fri Sat Sun, ranges Mon-Fri, lists Mon,Wed,Fri)`},
		{"Mon,,Fri 06:00-20:00 UTC", `window 1 "Mon,,Fri 06:00-20:00 UTC": empty day in "Mon,,Fri" (a list is Mon,Wed,Fri)`},
		{"Mon-Fri 0600-2000 UTC", `window 1 "Mon-Fri 0600-2000 UTC": bad time "0600": want HH:MM from 00:00 to 24:00`},
		{"Mon-Fri 06:00 UTC", `window 1 "Mon-Fri 06:00 UTC": bad hours "06:00": want HH:MM-HH:MM, e.g. 06:00-20:00`},
		{"Mon-Fri 06:00-25:00 UTC", `window 1 "Mon-Fri 06:00-25:00 UTC": bad time "25:00": want HH:MM from 00:00 to 24:00`},
		{"Mon-Fri 06:60-20:00 UTC", `window 1 "Mon-Fri 06:60-20:00 UTC": bad time "06:60": want HH:MM from 00:00 to 24:00`},
		{"Mon-Fri 06:00-24:30 UTC", `window 1 "Mon-Fri 06:00-24:30 UTC": bad time "24:30": want HH:MM from 00:00 to 24:00`},
		{"Mon-Fri +6:00-20:00 UTC", `window 1 "Mon-Fri +6:00-20:00 UTC": bad time "+6:00": want HH:MM from 00:00 to 24:00`},
		{"Mon-Fri 24:00-24:00 UTC", `window 1 "Mon-Fri 24:00-24:00 UTC": a window cannot open at 24:00 (use 00:00 of the next day)`},
		{"Mon-Fri 06:00-20:00 Asia/Kolkatta", `window 1 "Mon-Fri 06:00-20:00 Asia/Kolkatta": unknown time zone "Asia/Kolkatta": want an IANA name such as Asia/Kolkata, Europe/London or UTC`},
		{"Mon-Fri 06:00-20:00 IST", `window 1 "Mon-Fri 06:00-20:00 IST": unknown time zone "IST": want an IANA name such as Asia/Kolkata, Europe/London or UTC`},
		{"Mon-Fri 06:00-20:00 Local", `window 1 "Mon-Fri 06:00-20:00 Local": time zone "Local" is the machine's, which differs between hosts: name the bank's zone (e.g. Asia/Kolkata or UTC)`},
	} {
		_, err := calendar.ParseWindows(c.spec)
		if err == nil {
			t.Errorf("%q: accepted", c.spec)
			continue
		}
		if !errors.Is(err, calendar.ErrBadSpec) {
			t.Errorf("%q: %v is not ErrBadSpec", c.spec, err)
		}
		if got := strings.TrimPrefix(err.Error(), pre); got != c.want || !strings.HasPrefix(err.Error(), pre) {
			t.Errorf("%q:\n got %s\nwant %s%s", c.spec, err, pre, c.want)
		}
	}
}

// The suggestion of a refused window across midnight is itself a spec
// that parses.
func TestTheSuggestedSplitParses(t *testing.T) {
	_, err := calendar.ParseWindows("Mon-Fri 22:00-02:00 Asia/Kolkata")
	_, split, ok := strings.Cut(err.Error(), "as ")
	if !ok {
		t.Fatalf("no suggestion in %v", err)
	}
	if _, err := calendar.ParseWindows(strings.Trim(split, `"`)); err != nil {
		t.Fatalf("the suggestion %s does not parse: %v", split, err)
	}
}

func TestNewRefusesWindowsThatCannotWork(t *testing.T) {
	if _, err := calendar.New(nil, calendar.Holidays{}); !errors.Is(err, calendar.ErrBadSpec) {
		t.Errorf("no window: %v", err)
	}
	if _, err := calendar.New([]calendar.Window{{Days: [7]bool{1: true}, Start: 0, End: 3600e9}}, calendar.Holidays{}); err == nil ||
		err.Error() != "calendar: bad posting windows: window 1: no time zone" {
		t.Errorf("no zone: %v", err)
	}
}
