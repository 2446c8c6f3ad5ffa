package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// A reopen's confirmation page names the bank key the new attempt is
// debited under; the POST must act on that record, not on whatever it
// became meanwhile (another operator reopened it, the bank declined the
// second attempt too: the POST would make a third attempt under a key
// nobody confirmed, over a decline nobody saw).
func TestAttack54ConsoleReopenActsOnTheRecordItsConfirmationShowed(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-TOCTOU-1", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	_, confirm := as(t, "olga", "GET", srv.URL+"/charge/reopen?id=CHG-TOCTOU-1", nil)
	mustContain(t, "the confirmation", confirm, "CHG-TOCTOU-1~2")
	form := formOf(t, confirm, "confirm-form")

	// Meanwhile: another operator reopens it with a new attempt, and the
	// bank declines that one too.
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, "CHG-TOCTOU-1", "INC-1: ivan's", true, "ivan"); err != nil {
		t.Fatal(err)
	}
	w.declinedAgain(t, "CHG-TOCTOU-1", "DO_NOT_HONOUR")

	form.Set("reason", "INC-2: customer paid in")
	form.Set("new_attempt", "on")
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", form)
	rec, err := w.store.Get(t.Context(), "CHG-TOCTOU-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Generation != 2 || rec.State != driver.StateFailed {
		t.Fatalf("the POST reopened a record its confirmation did not show: now %s generation %d (confirmed: the next key CHG-TOCTOU-1~2); answer %d\n%s",
			rec.State, rec.Generation, code, body)
	}
	if code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("the refusal does not say why: %d\n%s", code, body)
	}
	// Confirmed afresh, it is done.
	_, confirm = as(t, "olga", "GET", srv.URL+"/charge/reopen?id=CHG-TOCTOU-1", nil)
	mustContain(t, "the new confirmation", confirm, "CHG-TOCTOU-1~3")
	form = formOf(t, confirm, "confirm-form")
	form.Set("reason", "INC-2: customer paid in")
	form.Set("new_attempt", "on")
	if code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", form); code != http.StatusOK {
		t.Fatalf("the reopen confirmed afresh: %d\n%s", code, body)
	}
}
