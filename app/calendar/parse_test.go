package calendar_test

import (
	"errors"
	"strings"
	"testing"
	_ "time/tzdata" // the zones, whatever the machine has

	"github.com/finedge/idempotent-consumer/app/calendar"
)

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
