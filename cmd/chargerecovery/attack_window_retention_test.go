package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nextWeekday is the first date after from (at least a week on) that
// falls on day.
func nextWeekday(from time.Time, day time.Weekday) time.Time {
	d := from.AddDate(0, 0, 7)
	for d.Weekday() != day {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

// Posting windows Mon-Fri 06:00-20:00 and a Monday and Tuesday holiday
// (India: a festival next to a weekend is common) close the calendar from
// Friday 20:00 to Wednesday 06:00: 4 days 10 hours. The calendar's gate
// receives nothing meanwhile, by design, and the queue's message retention
// is 4 days (the default of the SQL queues and of SQS): every charge that
// arrives as the window closes is deleted by the queue's retention before
// it opens — never received, no record, nothing in the DLQ, nothing to
// alert on. serve started with that calendar as if nothing were wrong.
func TestAttackPostingWindowsClosedLongerThanTheQueueRetentionStart(t *testing.T) {
	dir := t.TempDir()
	monday := nextWeekday(time.Now().UTC(), time.Monday)
	holidays := filepath.Join(dir, "holidays")
	if err := os.WriteFile(holidays, fmt.Appendf(nil, "%s festival\n%s festival\n",
		monday.Format(time.DateOnly), monday.AddDate(0, 0, 1).Format(time.DateOnly)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "x.db"), "IC_HTTP_ADDR": "127.0.0.1:0"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := runCmd(ctx, env, "serve", "--corebank-url", "http://127.0.0.1:1", "--notify", "log",
		"--posting-windows", "Mon-Fri 06:00-20:00 UTC", "--holidays", holidays)
	if r.code != exitUsage || !strings.Contains(r.stderr, "retention") {
		t.Fatalf("serve with a calendar closed 4 days 10 hours over a 4-day message retention: exit %d; want it refused (2) saying the queue's retention is shorter than the closure; stderr: %s",
			r.code, lastLines(r.stderr, 5))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
