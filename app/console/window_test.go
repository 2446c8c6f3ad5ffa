package console_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// While the consumer reports its posting window closed, the overview says
// so, and the page of a charge not yet debited says it waits for the
// window; a charge already debited does not.
func TestTheConsoleSaysAChargeWaitsForThePostingWindow(t *testing.T) {
	w := newWorld(t)
	m := metrics.New()
	m.PostingWindow(func() (bool, time.Time) { return false, time.Date(2026, 12, 4, 3, 30, 0, 0, time.UTC) })
	ms := httptest.NewServer(m.Handler())
	defer ms.Close()
	// A charge waiting for its retry.
	if _, err := w.store.Claim(t.Context(), driver.ClaimRequest{Key: "CHG-WAIT-1", Token: "t1", Fingerprint: "fp", Now: time.Now(),
		LeaseExpiredBy: time.Now(), LeaseUntil: time.Now().Add(time.Minute), ExpiresAt: time.Now().Add(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := w.store.Finish(t.Context(), driver.FinishRequest{Key: "CHG-WAIT-1", Token: "t1", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
		Detail: "next attempt at 2026-12-04T03:30:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)", Now: time.Now(),
		NotBefore: time.Now().Add(time.Hour), ExpiresAt: time.Now().Add(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) { o.MetricsURL = ms.URL })
	// In this order: the charge's page says what the overview's last
	// sample of the consumer said (a map's order made it fail one run in two).
	for _, tc := range []struct{ path, want string }{
		{"/", "outside posting window until 2026-12-04T03:30:00Z"},
		{"/charge?id=CHG-WAIT-1", "waiting for the posting window: outside posting window until 2026-12-04T03:30:00Z"},
	} {
		path, want := tc.path, tc.want
		code, body := as(t, "vera", "GET", srv.URL+path, nil)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", path, code, want, body)
		}
	}
	if _, body := as(t, "vera", "GET", srv.URL+"/charge?id=CHG-DONE-1", nil); strings.Contains(body, "waiting for the posting window") {
		t.Error("a debited charge's page says it waits for the posting window")
	}
	if _, body := as(t, "vera", "GET", srv.URL+"/charge?id=CHG-WAIT-1", nil); !strings.Contains(body, "attempt 2 of 4, after INSUFFICIENT_FUNDS") {
		t.Errorf("the waiting charge's schedule is not shown:\n%s", body)
	}
}
