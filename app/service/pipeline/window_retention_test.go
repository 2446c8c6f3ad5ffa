package pipeline_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/calendar"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
)

// Posting windows whose closures, with the 12 hours a waiting charge's
// message may be old when its wait ends, fit in the queue's message
// retention start; one closed longer is refused, saying for how long and
// what to raise.
func TestWindowsClosedLongerThanTheRetentionAreRefused(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC) // a Monday
	const fourDays = 4 * 24 * time.Hour
	for _, c := range []struct {
		name, spec, holidays string
		retention            time.Duration
		refused              string
	}{
		{"a weekend", "Mon-Fri 06:00-20:00 UTC", "", fourDays, ""},
		{"a weekend and a holiday Monday", "Mon-Fri 06:00-20:00 UTC", "2026-03-09 a\n", fourDays, ""},
		{"a weekend and two holidays", "Mon-Fri 06:00-20:00 UTC", "2026-03-09 a\n2026-03-10 b\n", fourDays, "closed for 106h0m0s (from Fri 2026-03-06 20:00 UTC to Wed 2026-03-11 06:00 UTC)"},
		{"the same with a week's retention", "Mon-Fri 06:00-20:00 UTC", "2026-03-09 a\n2026-03-10 b\n", 7 * 24 * time.Hour, ""},
		{"one hour a week", "Mon 06:00-07:00 UTC", "", fourDays, "closed for 167h0m0s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := calendar.ParseHolidays(strings.NewReader(c.holidays))
			if err != nil {
				t.Fatal(err)
			}
			cal, err := calendar.Parse(c.spec, h)
			if err != nil {
				t.Fatal(err)
			}
			err = pipeline.CheckWindowRetention(cal, c.retention, now)
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused) || !errors.As(err, new(*cli.UsageError))):
				t.Fatalf("got %v, want a usage error saying %q", err, c.refused)
			}
		})
	}
	if err := pipeline.CheckWindowRetention(nil, time.Hour, now); err != nil {
		t.Fatalf("no calendar: %v", err)
	}
}
