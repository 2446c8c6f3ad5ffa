package calendar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadSpec: a posting-windows spec that cannot be read. The error's
// text says what to fix.
var ErrBadSpec = errors.New("calendar: bad posting windows")

// Example is a window spec, for messages.
const Example = "Mon-Fri 06:00-20:00 Asia/Kolkata"

// ParseWindows reads a posting-windows spec: windows separated by ";",
// each "DAYS HH:MM-HH:MM ZONE" —
//
//	Mon-Fri 06:00-20:00 Asia/Kolkata; Sat 06:00-13:00 Asia/Kolkata
//
// DAYS is a day (Mon, or Monday; any case), a range (Mon-Fri; Fri-Mon
// runs over the weekend) or a list of them (Mon,Wed,Fri or Mon-Wed,Fri),
// without spaces. The hours are 24-hour times from 00:00 to 24:00; a
// window closes after it opens on the same day (one across midnight is
// refused: split it at midnight). ZONE is an IANA time-zone name
// (Asia/Kolkata, Europe/London, UTC); the Etc/GMT±N zones (whose sign is
// inverted) and EST, MST, HST (no summer time) are refused with the fix.
// A trailing ";" is allowed.
func ParseWindows(spec string) ([]Window, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%w: none given (e.g. %q)", ErrBadSpec, Example)
	}
	parts := strings.Split(spec, ";")
	var out []Window
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			if i == len(parts)-1 {
				continue // a trailing ";"
			}
			return nil, fmt.Errorf(`%w: window %d is empty (two ";" in a row?)`, ErrBadSpec, i+1)
		}
		w, err := parseWindow(p)
		if err != nil {
			return nil, fmt.Errorf("%w: window %d %q: %v", ErrBadSpec, i+1, p, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func parseWindow(s string) (Window, error) {
	f := strings.Fields(s)
	if len(f) > 0 && strings.Contains(f[0], ":") {
		return Window{}, fmt.Errorf("the days come first: want DAYS HH:MM-HH:MM ZONE, e.g. %q", Example)
	}
	switch {
	case len(f) == 2 && strings.Contains(f[1], ":"):
		return Window{}, errors.New("no time zone: add an IANA name such as Asia/Kolkata or UTC after the hours")
	case len(f) < 3:
		return Window{}, fmt.Errorf("want DAYS HH:MM-HH:MM ZONE, e.g. %q", Example)
	case len(f) > 3:
		return Window{}, fmt.Errorf("too many fields: write the days without spaces (Mon,Wed,Fri) and one zone; want DAYS HH:MM-HH:MM ZONE, e.g. %q", Example)
	}
	var w Window
	var err error
	if w.Days, err = parseDays(f[0]); err != nil {
		return Window{}, err
	}
	if w.Start, w.End, err = parseHours(f[1]); err != nil {
		return Window{}, err
	}
	if w.Loc, err = loadZone(f[2]); err != nil {
		return Window{}, err
	}
	switch {
	case w.Start == w.End:
		return Window{}, fmt.Errorf("%s-%s is empty: a window closes after it opens (all day is 00:00-24:00)", clock(w.Start), clock(w.End))
	case w.Start > w.End:
		before, after := w, w
		before.End = 24 * time.Hour
		after.Start = 0
		after.Days = [7]bool{}
		for d, on := range w.Days {
			after.Days[(d+1)%7] = on
		}
		return Window{}, fmt.Errorf("%s-%s crosses midnight, which is not supported: split it at midnight, as %q",
			clock(w.Start), clock(w.End), before.String()+"; "+after.String())
	}
	return w, nil
}

var dayNames = map[string]time.Weekday{
	"mon": time.Monday, "monday": time.Monday,
	"tue": time.Tuesday, "tues": time.Tuesday, "tuesday": time.Tuesday,
	"wed": time.Wednesday, "wednesday": time.Wednesday,
	"thu": time.Thursday, "thur": time.Thursday, "thurs": time.Thursday, "thursday": time.Thursday,
	"fri": time.Friday, "friday": time.Friday,
	"sat": time.Saturday, "saturday": time.Saturday,
	"sun": time.Sunday, "sunday": time.Sunday,
}

func parseDay(s string) (time.Weekday, error) {
	d, ok := dayNames[strings.ToLower(s)]
	if !ok {
		return 0, fmt.Errorf("unknown day %q (days are Mon Tue Wed Thu Fri Sat Sun, ranges Mon-Fri, lists Mon,Wed,Fri)", s)
	}
	return d, nil
}

func parseDays(s string) ([7]bool, error) {
	var set [7]bool
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return set, fmt.Errorf("empty day in %q (a list is Mon,Wed,Fri)", s)
		}
		from, to, isRange := strings.Cut(item, "-")
		a, err := parseDay(from)
		if err != nil {
			return set, err
		}
		b := a
		if isRange {
			if b, err = parseDay(to); err != nil {
				return set, err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			set[d] = true
			if d == b {
				break
			}
		}
	}
	return set, nil
}

func parseHours(s string) (start, end time.Duration, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("bad hours %q: want HH:MM-HH:MM, e.g. 06:00-20:00", s)
	}
	if start, err = parseClock(a); err != nil {
		return 0, 0, err
	}
	if end, err = parseClock(b); err != nil {
		return 0, 0, err
	}
	if start == 24*time.Hour {
		return 0, 0, errors.New("a window cannot open at 24:00 (use 00:00 of the next day)")
	}
	return start, end, nil
}

func parseClock(s string) (time.Duration, error) {
	bad := fmt.Errorf("bad time %q: want HH:MM from 00:00 to 24:00", s)
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) < 1 || len(h) > 2 || len(m) != 2 {
		return 0, bad
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || hh == 24 && mm != 0 ||
		strings.ContainsAny(s, "+- ") {
		return 0, bad
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

func loadZone(name string) (*time.Location, error) {
	if strings.EqualFold(name, "local") {
		return nil, errors.New(`time zone "Local" is the machine's, which differs between hosts: name the bank's zone (e.g. Asia/Kolkata or UTC)`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: want an IANA name such as Asia/Kolkata, Europe/London or UTC", name)
	}
	base := strings.TrimPrefix(strings.TrimPrefix(name, "posix/"), "right/")
	_, off := time.Date(2025, 1, 1, 0, 0, 0, 0, loc).Zone()
	switch {
	case (strings.HasPrefix(base, "Etc/GMT+") || strings.HasPrefix(base, "Etc/GMT-")) && off != 0:
		return nil, fmt.Errorf("time zone %q is %s, not %s (its sign is POSIX's, inverted): name the bank's city instead (e.g. Asia/Kolkata)",
			name, utcOffset(off), utcOffset(-off))
	case base == "EST" || base == "MST" || base == "HST":
		return nil, fmt.Errorf("time zone %q is %s all year, without summer time: name the bank's city instead (America/New_York, America/Denver, Pacific/Honolulu)",
			name, utcOffset(off))
	}
	return loc, nil
}

// utcOffset writes seconds east of UTC as UTC+05:30.
func utcOffset(off int) string {
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("UTC%c%02d:%02d", sign, off/3600, off%3600/60)
}

// clock is a time after midnight as HH:MM.
func clock(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

var shortDays = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// days writes a set of weekdays from Monday: runs of two or more as a
// range (Mon-Fri), the rest as a list (Mon-Wed,Fri).
func days(set [7]bool) string {
	var parts []string
	order := [7]time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday}
	for i := 0; i < 7; {
		if !set[order[i]] {
			i++
			continue
		}
		j := i
		for j+1 < 7 && set[order[j+1]] {
			j++
		}
		if j == i {
			parts = append(parts, shortDays[order[i]])
		} else {
			parts = append(parts, shortDays[order[i]]+"-"+shortDays[order[j]])
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
