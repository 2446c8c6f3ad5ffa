//go:build knowndefects

package console_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Known defect (attack 54), left: the seal that binds a redrive or reopen
// to the record its confirmation page spelt out is checked when the form
// carries it (the console's own pages always do), not required. A POST
// without one — the operator's own script: it needs her session and CSRF
// token, same-origin — still acts on the record as it is then. Requiring
// it changes every form-less test of the package (some 20 POSTs, the
// double-submit and rotation reviews among them), too much for this round.
func TestAttack54ConsoleAReopenWithoutTheConfirmationsSealIsRefused(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"INC-S"}, "new_attempt": {"on"}})
	if rec, _ := w.store.Get(t.Context(), w.failed, time.Now()); rec.State != driver.StateFailed || code != http.StatusBadRequest {
		t.Fatalf("a reopen without its confirmation's seal was taken: %d, the record %s\n%s", code, rec.State, body)
	}
}
