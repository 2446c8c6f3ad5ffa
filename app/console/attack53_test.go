package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// bulk>0 asks a second operator for every action touching a charge (the
// console's reopen, redrive and renotify of one charge are proposals
// under it). The Reconciliation page judged the policy only under
// reconcile-adopt: under bulk>0 one operator adopted a posting — money
// recorded as collected without a debit — alone.
func TestAttack53MovedConsoleAdoptionUnderBulkOverZeroNeedsAProposal(t *testing.T) {
	w := newReconWorld(t)
	auth := console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}
	book := w.withBook(t, "bulk>0")
	srv := w.consoleWith(t, auth, func(o *console.Options) {
		o.ReconcileReport, o.Fingerprints, o.ActionBurst = w.report, w.fp, 10
		book(o)
	})
	_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
	crashed := w.breakOf(t, w.crashed.ID)
	v := url.Values{"id": {crashed.ChargeID}, "kind": {string(crashed.Kind)}, "break": {crashed.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-7: checked with the bank"}}
	code, body := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", v)
	if code != http.StatusConflict || !strings.Contains(body, "Needs another operator") {
		t.Fatalf("a direct adoption under bulk>0: %d\n%s", code, body)
	}
	if rec, err := w.store.Get(t.Context(), w.crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the adoption wrote the record without approval: %+v %v", rec, err)
	}
}
