package calendar

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// ErrBadHolidays: a holidays file that cannot be read; the error names the
// line and says what to fix.
var ErrBadHolidays = errors.New("calendar: bad holidays file")

// Holidays are the dates on which no window opens, each with its name
// (may be empty). The zero value has none.
type Holidays struct {
	names map[Date]string
}

// Has reports whether d is a holiday.
func (h Holidays) Has(d Date) bool {
	_, ok := h.names[d]
	return ok
}

// Name is d's name, and whether d is a holiday.
func (h Holidays) Name(d Date) (string, bool) {
	n, ok := h.names[d]
	return n, ok
}

// Last is the latest holiday; ok is false when there is none.
func (h Holidays) Last() (last Date, ok bool) {
	for d := range h.names {
		if !ok || d.midnight().After(last.midnight()) {
			last, ok = d, true
		}
	}
	return last, ok
}

// Len is how many holidays there are.
func (h Holidays) Len() int { return len(h.names) }

var dateShape = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// ParseHolidays reads a holidays file: one date a line, YYYY-MM-DD, with an
// optional name after it; blank lines, and comments from a "#" at the
// start of a line or after a space, are skipped. A date listed twice keeps
// its first name. A line that is not a date is an error naming its number.
func ParseHolidays(r io.Reader) (Holidays, error) { return parseHolidays(r, "") }

// ReadHolidays is ParseHolidays of the file at path; its errors name the
// file too.
func ReadHolidays(path string) (Holidays, error) {
	f, err := os.Open(path)
	if err != nil {
		return Holidays{}, fmt.Errorf("calendar: holidays file: %w", err)
	}
	defer f.Close()
	return parseHolidays(f, path+" ")
}

func parseHolidays(r io.Reader, source string) (Holidays, error) {
	h := Holidays{names: map[Date]string{}}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\uFEFF") // a byte-order mark
		}
		f := strings.Fields(stripComment(line))
		if len(f) == 0 {
			continue
		}
		if !dateShape.MatchString(f[0]) {
			return Holidays{}, fmt.Errorf("%w: %sline %d: %s: want YYYY-MM-DD (e.g. 2025-01-26), then an optional name",
				ErrBadHolidays, source, n, notADate(f[0]))
		}
		t, err := time.Parse(time.DateOnly, f[0])
		if err != nil {
			return Holidays{}, fmt.Errorf("%w: %sline %d: no such day %s (month 01-12, day within the month)", ErrBadHolidays, source, n, f[0])
		}
		if _, seen := h.names[DateOf(t)]; !seen {
			h.names[DateOf(t)] = strings.Join(f[1:], " ")
		}
	}
	if err := sc.Err(); err != nil {
		return Holidays{}, fmt.Errorf("%w: %safter line %d: %v", ErrBadHolidays, source, n, err)
	}
	return h, nil
}

// dateLike is what may be quoted back from a line that is not a date:
// up to three groups of digits joined by the separators of dates
// (26/03/2025, 2025-1-26, 26.03). Any other text (a run of digits too: an
// account number) is not repeated: a file given by mistake (a key, a
// credentials file) must not land in the log.
var dateLike = regexp.MustCompile(`^[0-9]{1,4}[./-][0-9]{1,4}([./-][0-9]{1,4})?$`)

// notADate says why a line's first field is not a date, quoting it only
// when it looks like one.
func notADate(field string) string {
	switch {
	case dateLike.MatchString(field):
		return fmt.Sprintf("%q is not a date", field)
	case len(field) > 10 && dateShape.MatchString(field[:10]) && field[10] == '#':
		return fmt.Sprintf("%s is followed by # without a space: a comment starts at a # after white space", field[:10])
	}
	return "it does not start with a date (its text is not shown: is this the holidays file?)"
}

// stripComment cuts line at a "#" that starts it or follows white space.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}
