package console_test

import (
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The console checks that the form's break id is the kept report's, but
// then resolves whatever break of that kind the charge has NOW: Resolve is
// called without ResolveRequest.BreakID. The statement the report names
// was rewritten since (a corrected camt, another posting under the key):
// the operator saw and chose posting BANK-CHG-REC-2, the console adopts
// another one, unseen, with no "the break changed" refusal.
func TestAttack2ConsoleAdoptsABreakOtherThanTheOneShown(t *testing.T) {
	w := newReconWorld(t)
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
	})
	shown := w.breakOf(t, w.crashed.ID)
	// The statement file changes under the kept report.
	span := w.rep.Span()
	req := w.crashed.DebitRequest()
	f, err := os.Create(w.rep.Statements[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Period: span},
		[]statement.Posting{{BankKey: req.IdempotencyKey, Account: w.crashed.AccountID, Amount: w.crashed.Amount, BookingDate: span.From,
			Reference: "BANK-SWAPPED", Narrative: req.Narrative}}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
	form := url.Values{"id": {shown.ChargeID}, "kind": {string(shown.Kind)}, "break": {shown.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-9: BANK-CHG-REC-2 checked"}}
	code, body := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", form)
	rec, _ := w.store.Get(t.Context(), w.crashed.ID, time.Now())
	if code == http.StatusOK || rec.State == driver.StateDone {
		t.Fatalf("the form named break %s (posting BANK-CHG-REC-2); the console answered %d and the record is %s with reference %q: a break the operator never saw was adopted",
			shown.ID, code, rec.State, charge.ReferenceOf(rec.Status, rec.Detail))
	}
	_ = body
}
