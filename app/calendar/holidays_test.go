package calendar_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/calendar"
)

func TestParseHolidays(t *testing.T) {
	file := "\uFEFF# NPCI holidays, Mumbai\r\n" +
		"\n" +
		"2025-01-26 Republic Day\r\n" +
		"   # indented comment\n" +
		"2025-03-14\tHoli   # the festival of colours\n" +
		"2025-08-15 Independence Day\n" +
		"2025-08-15 listed twice\n" +
		"2025-10-02 Gandhi Jayanti # national\n" +
		"2025-10-20 Diwali#Deepavali\n" +
		"2025-12-25\n"
	h, err := calendar.ParseHolidays(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if h.Len() != 6 {
		t.Errorf("%d holidays, want 6", h.Len())
	}
	for d, want := range map[calendar.Date]string{
		{Year: 2025, Month: 1, Day: 26}:  "Republic Day",
		{Year: 2025, Month: 3, Day: 14}:  "Holi",
		{Year: 2025, Month: 8, Day: 15}:  "Independence Day",
		{Year: 2025, Month: 10, Day: 2}:  "Gandhi Jayanti",
		{Year: 2025, Month: 10, Day: 20}: "Diwali#Deepavali",
		{Year: 2025, Month: 12, Day: 25}: "",
	} {
		if got, ok := h.Name(d); !ok || got != want {
			t.Errorf("%s: %q, %v; want %q", d, got, ok, want)
		}
	}
	if h.Has(calendar.Date{Year: 2025, Month: 1, Day: 27}) {
		t.Error("2025-01-27 is no holiday")
	}
	if (calendar.Holidays{}).Has(calendar.Date{Year: 2025, Month: 1, Day: 26}) {
		t.Error("the zero Holidays has a holiday")
	}
}

func TestParseHolidaysNamesTheBadLine(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"2025-01-26 Republic Day\n26/03/2025 Holi\n", `calendar: bad holidays file: line 2: "26/03/2025" is not a date: want YYYY-MM-DD (e.g. 2025-01-26), then an optional name`},
		{"# list\n\n2025-1-26\n", `calendar: bad holidays file: line 3: "2025-1-26" is not a date: want YYYY-MM-DD (e.g. 2025-01-26), then an optional name`},
		{"Republic Day 2025-01-26\n", `calendar: bad holidays file: line 1: it does not start with a date (its text is not shown: is this the holidays file?): want YYYY-MM-DD (e.g. 2025-01-26), then an optional name`},
		{"2025-01-26\n2025-02-30 nothing\n", `calendar: bad holidays file: line 2: no such day 2025-02-30 (month 01-12, day within the month)`},
		{"2025-13-01\n", `calendar: bad holidays file: line 1: no such day 2025-13-01 (month 01-12, day within the month)`},
		{"2025-01-26#no space before the hash\n", `calendar: bad holidays file: line 1: 2025-01-26 is followed by # without a space: a comment starts at a # after white space: want YYYY-MM-DD (e.g. 2025-01-26), then an optional name`},
		{strings.Repeat("x", 70<<10), `calendar: bad holidays file: after line 0: bufio.Scanner: token too long`},
	} {
		_, err := calendar.ParseHolidays(strings.NewReader(c.file))
		if err == nil || err.Error() != c.want || !errors.Is(err, calendar.ErrBadHolidays) {
			t.Errorf("%.40q:\n got %v\nwant %s", c.file, err, c.want)
		}
	}
}

func TestReadHolidaysNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "holidays.txt")
	if err := os.WriteFile(good, []byte("2025-01-26 Republic Day\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if h, err := calendar.ReadHolidays(good); err != nil || h.Len() != 1 {
		t.Fatalf("%d holidays, %v", h.Len(), err)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("2025-01-26\n2025-02-29 not a leap year\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := calendar.ReadHolidays(bad)
	if want := "calendar: bad holidays file: " + bad + " line 2: no such day 2025-02-29 (month 01-12, day within the month)"; err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	if _, err := calendar.ReadHolidays(filepath.Join(dir, "missing.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestHolidaysLast(t *testing.T) {
	h, err := calendar.ParseHolidays(strings.NewReader("2025-12-25\n2026-01-26\n2025-08-15\n"))
	if err != nil {
		t.Fatal(err)
	}
	if last, ok := h.Last(); !ok || last != (calendar.Date{Year: 2026, Month: 1, Day: 26}) {
		t.Errorf("last %s, %v", last, ok)
	}
	if _, ok := (calendar.Holidays{}).Last(); ok {
		t.Error("no holidays has a last")
	}
}

// A holidays file given by mistake (IC_HOLIDAYS pointing at the
// fingerprint key, a credentials file) must not have its content printed:
// serve writes the error to its log. The key made as the docs say
// (openssl rand -base64 48) is one line without spaces, so "the first
// field of the line" is the whole secret.
func TestAttackBadHolidaysFileDoesNotEchoASecret(t *testing.T) {
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	secret := base64.StdEncoding.EncodeToString(b)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"fingerprint.key": secret + "\n",
		"corebank.env":    "client_secret " + secret + "\n",
		"token":           "2025-01-26 Republic Day\n" + secret + "\n",
		"digits.key":      "7" + secret + "\n",
		"account":         "001234567890123456\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := calendar.ReadHolidays(path)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		for _, part := range []string{secret, secret[:12], "client_secret", "001234567890"} {
			if strings.Contains(err.Error(), part) {
				t.Errorf("%s: the error prints the file's content %q: %v", name, part, err)
			}
		}
		if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "YYYY-MM-DD") {
			t.Errorf("%s: the error no longer says which line and what to write: %v", name, err)
		}
	}
}

// Etc/GMT+5 parses, and is five hours behind UTC, not ahead (the POSIX
// sign, inverted): "Mon-Fri 06:00-20:00 Etc/GMT+5" written for a bank at
// UTC+5 posts from 11:00 to 01:00 UTC instead of 01:00 to 15:00 — ten
// hours off, debits at the bank's 16:00-06:00. And EST is New York
// without its summer time, an hour off for half the year. Such zones must
// be refused, naming the zone to use.
func TestAttackZonesThatMeanSomethingElseAreRefused(t *testing.T) {
	for _, zone := range []string{"Etc/GMT+5", "Etc/GMT-5", "EST", "MST", "HST"} {
		_, err := calendar.ParseWindows("Mon-Fri 06:00-20:00 " + zone)
		if err == nil {
			t.Errorf("%s: accepted", zone)
		}
	}
	for _, zone := range []string{"UTC", "Etc/UTC", "Asia/Kolkata", "America/New_York", "EST5EDT", "Etc/GMT"} {
		if _, err := calendar.ParseWindows("Mon-Fri 06:00-20:00 " + zone); err != nil {
			t.Errorf("%s: %v", zone, err)
		}
	}
}
