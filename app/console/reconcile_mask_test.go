package console_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// A statement with a credit whose end-to-end id (its bank key) is the
// payer's account number: the console's reconciliation page shows the key
// masked — for the report a run keeps now, and for one kept unmasked by an
// earlier version — and our own charge's key as it is; the break is
// resolved from the page under its masked id, and the trail holds no
// account either.
func TestReconciliationPageMasksAForeignKeyThatIsAnAccountNumber(t *testing.T) {
	const payer = "123456789012"
	w := newReconWorld(t)
	day, err := time.Parse(time.RFC3339, w.rep.Period.From)
	if err != nil {
		t.Fatal(err)
	}
	credit := statement.Posting{BankKey: payer, Account: payer, Amount: charge.Money{Minor: 100000, Currency: "INR"}, BookingDate: day,
		Reference: "NEFT-IN-" + payer}
	stmt := filepath.Join(t.TempDir(), "credit.xml")
	f, err := os.Create(stmt)
	if err != nil {
		t.Fatal(err)
	}
	period := statement.Period{From: day, To: day.AddDate(0, 0, 1)}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-2", Account: "FEES-001", Period: period}, []statement.Posting{credit}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	files := append(slices.Clone(w.rep.Statements), stmt)
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: w.store, Fingerprints: w.fp, Period: period},
		reconcile.ReadFiles(files, statement.Options{CollectionAccount: "FEES-001"}))
	if err != nil {
		t.Fatal(err)
	}
	rep.Statements, rep.CollectionAccount = files, "FEES-001"

	// As a run keeps it now, and as an earlier version kept it (the key
	// whole in the file).
	now := filepath.Join(t.TempDir(), "recon.json")
	if err := reconcile.WriteReportFile(now, rep); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(now)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(t.TempDir(), "recon-old.json")
	unmasked := strings.ReplaceAll(string(raw), `"********9012"`, `"`+payer+`"`)
	if unmasked == string(raw) {
		t.Fatalf("the kept report has no masked key to unmask:\n%s", raw)
	}
	if err := os.WriteFile(old, []byte(unmasked), 0o600); err != nil {
		t.Fatal(err)
	}
	// The one kept unmasked first: the other resolves the break.
	for _, tc := range []struct{ name, file string }{{"kept unmasked", old}, {"kept now", now}} {
		name, file := tc.name, tc.file
		t.Run(name, func(t *testing.T) {
			srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
				o.ReconcileReport, o.Fingerprints, o.ActionBurst = file, w.fp, 10
			})
			_, body := as(t, "olga", "GET", srv.URL+"/reconciliation", nil)
			if strings.Contains(body, payer) || strings.Contains(body, "56789012") {
				t.Errorf("the page shows the payer's account:\n%s", body)
			}
			for _, want := range []string{"unknown_posting ********9012", "posted_not_recorded CHG-REC-2"} {
				if !strings.Contains(strings.Join(openBreaks(body), "\n"), want) {
					t.Errorf("the page lists %q, want %q", openBreaks(body), want)
				}
			}
			if name != "kept now" {
				return
			}
			var br reconcile.Break
			for _, b := range rep.Breaks {
				if b.Kind == reconcile.UnknownPosting {
					br = b
				}
			}
			form := url.Values{"id": {br.ChargeID}, "kind": {string(br.Kind)}, "break": {br.ID}, "csrf": {csrfOf(t, body)}, "reason": {"INC-9: a credit"}}
			code, res := as(t, "olga", "POST", srv.URL+"/reconciliation/resolve", form)
			if code != http.StatusOK || !strings.Contains(res, "marked resolved") || strings.Contains(res, payer) {
				t.Fatalf("resolve under the masked id: %d\n%s", code, res)
			}
			trail, err := os.ReadFile(w.audit)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(trail), payer) || !strings.Contains(string(trail), "********9012") {
				t.Errorf("the trail:\n%s", trail)
			}
		})
	}
}
