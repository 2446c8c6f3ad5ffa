package reconcile_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// The reconciliation report shows a charge id by the rule every view
// uses (charge.ShowID): an id holding the row's account grouped, or
// another account's digits, is masked as dlq list masks it.
func TestAttack54MaskShowKeyIsShowID(t *testing.T) {
	for _, tt := range []struct {
		key      string
		accounts []string
	}{
		{"CHG-0012-3456-7890", []string{"001234567890"}}, // the row's account, grouped
		{"CHG-0012-3456-7890~2", nil},                    // an account's grouping
		{"CHG-001234567890", nil},                        // an account's digits
		{"CHG-123-4567", []string{"1234567"}},            // a short account, grouped
	} {
		got := reconcile.ShowKey(tt.key, tt.accounts...)
		if got == tt.key {
			t.Errorf("ShowKey(%q, %q) = %q: shown whole (dlq list shows %q)", tt.key, tt.accounts, got, charge.ShowID(tt.key, tt.accounts...))
		}
	}
	for _, key := range []string{"CHG-2026-11-000123", "CHG-2026-11-000123~3", "CHG-2026-11-30-0001"} {
		if got := reconcile.ShowKey(key); got != key {
			t.Errorf("ShowKey(%q) = %q, want it whole", key, got)
		}
	}
}

// A posting's reference and where it was read, holding the payer's
// account grouped, are masked in every form of the report.
func TestAttack54MaskGroupedAccountInAPosting(t *testing.T) {
	const grouped = "1234-5678-9012" // payer, grouped
	b, _ := oneCharge(t, "MSG-", "own", (*books).failed)
	b.postings = append(b.postings,
		statement.Posting{BankKey: "E2E-X1", Account: payer, Amount: charge.Money{Minor: 5000, Currency: "INR"}, BookingDate: day,
			Reference: "NEFT-" + grouped + "-IN", Where: "camt.053 entry 8 (" + grouped + ")"})
	rep := b.run(t)
	text, csv, js := written(t, rep)
	_, file := keptFile(t, rep)
	for what, out := range map[string]string{"text": text, "CSV": csv, "JSON": js, "kept file": file} {
		if what != "JSON" && !strings.Contains(out, "NEFT-") && !strings.Contains(out, "E2E-X1") {
			t.Errorf("the %s report does not show the posting:\n%s", what, out)
		}
		if strings.Contains(out, grouped) {
			t.Errorf("the %s report shows the payer's account grouped:\n%s", what, out)
		}
	}
}
