package console_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// A redrive's confirmation page spells out what the charge's record makes
// of it ("nothing: FAILED", "not debited again"). If the record changed
// before the POST (reopened: the redrive now debits), the POST must not
// move money the page said would not move.
func TestAttack54ConsoleRedriveActsOnTheRecordItsConfirmationShowed(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-TOCTOU-2", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	entry := w.dlqIDs(t)["CHG-TOCTOU-2"]
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	mustContain(t, "the confirmation", html.UnescapeString(confirm), "nothing until an operator reopens it")
	form := formOf(t, confirm, "confirm-form")

	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, "CHG-TOCTOU-2", "INC-3: ivan's", true, "ivan"); err != nil {
		t.Fatal(err)
	}
	code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", form)
	if _, still := w.dlqIDs(t)["CHG-TOCTOU-2"]; !still {
		t.Fatalf("the redrive moved a message whose record changed since its confirmation (it said nothing is debited; now it is debited under CHG-TOCTOU-2~2): %d\n%s", code, body)
	}
	if code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("the refusal does not say why: %d\n%s", code, body)
	}
	// Confirmed afresh (now it says it debits), it moves.
	_, confirm = as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	mustContain(t, "the new confirmation", confirm, "CHG-TOCTOU-2~2")
	if code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", formOf(t, confirm, "confirm-form")); code != http.StatusOK {
		t.Fatalf("the redrive confirmed afresh: %d\n%s", code, body)
	}
}

// Issue 54 item 2 with the confirmation's seal: a charge id that carries
// its own account is shown masked on the confirmation page (and the form
// carries what the page showed), yet the POST checks the record the body's
// id keys: the redrive of a charge reopened since is still refused, and
// one confirmed afresh moves.
func TestAttack54ConsoleARedriveOfAChargeWhoseIDIsShownMasked(t *testing.T) {
	id := "CHG-" + account
	w := newWorld(t)
	w.declinedOnTheDLQ(t, id, "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	entry := w.dlqIDs(t)[id]
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	if strings.Contains(confirm, account) {
		t.Fatalf("the confirmation shows the account in the charge id:\n%s", confirm)
	}
	mustContain(t, "the confirmation", html.UnescapeString(confirm), charge.ShowID(id, account), "nothing until an operator reopens it")
	form := formOf(t, confirm, "confirm-form")
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, id, "INC-4", true, "ivan"); err != nil {
		t.Fatal(err)
	}
	if code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", form); code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("a redrive of a record changed since its confirmation: %d\n%s", code, body)
	}
	if _, still := w.dlqIDs(t)[id]; !still {
		t.Fatal("the message moved although its record changed since the confirmation")
	}
	_, confirm = as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	if code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", formOf(t, confirm, "confirm-form")); code != http.StatusOK {
		t.Fatalf("the redrive confirmed afresh: %d\n%s", code, body)
	}
	if _, still := w.dlqIDs(t)[id]; still {
		t.Fatal("the redrive confirmed afresh left the message on the DLQ")
	}
}
