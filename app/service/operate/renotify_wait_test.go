package operate

import (
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// renotify understands a waiting charge: nothing was debited, so nothing
// is sent; a notice-first charge says its advance notice went out.
func TestRenotifyOfAWaitingChargeSendsNothingAndSaysWhy(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		rec  driver.Record
		want string
	}{
		{driver.Record{Key: "C1", State: driver.StateWaiting, Status: "NOTICE_SENT", Detail: "notice sent at 2026-12-01T10:00:00Z, debit on or after 2026-12-02T10:00:00Z",
			LeaseUntil: now.Add(24 * time.Hour)}, "the advance notice went out"},
		{driver.Record{Key: "C2", State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Detail: "next attempt at 2026-12-02T10:00:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)",
			LeaseUntil: now.Add(24 * time.Hour)}, "not debited yet"},
	} {
		got := Renotifier{}.One(t.Context(), tt.rec, "op", "why", false, now)
		if got.Result != "skipped" || !strings.Contains(got.Why, tt.want) || !strings.Contains(got.Why, "nothing to send") {
			t.Errorf("renotify %s: %+v, want skipped saying %q", tt.rec.Status, got, tt.want)
		}
	}
}
