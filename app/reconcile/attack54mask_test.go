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

// A break of our own charge whose id is shown masked (it holds an
// account's digits) is still closed by the id and break the report gave,
// and the report shows none of the id's digits but its last four.
func TestAttack54MaskResolveOurChargeShownMasked(t *testing.T) {
	b, c := oneCharge(t, "CHG-", "001234567890", (*books).failed)
	b.post(c, 1, 2500, true)
	rep := b.run(t)
	var br *reconcile.Break
	for i := range rep.Breaks {
		if strings.HasSuffix(rep.Breaks[i].ChargeID, "7890") {
			br = &rep.Breaks[i]
		}
	}
	if br == nil || br.ChargeID == c.ID {
		t.Fatalf("breaks %+v: want %s's shown masked", rep.Breaks, c.ID)
	}
	text, csv, js := written(t, rep)
	for what, out := range map[string]string{"text": text, "CSV": csv, "JSON": js} {
		if strings.Contains(out, "12345678") {
			t.Errorf("the %s report shows the id's digits:\n%s", what, out)
		}
	}
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: br.ChargeID, BreakID: br.ID, Reason: "INC-9", Operator: "ops", Guard: b.guard, Unverified: true})
	if err != nil || res.Break.ID != br.ID {
		t.Fatalf("Resolve by the id shown: %+v %v", res, err)
	}
	if strings.Contains(mustJSON(t, res), "12345678") {
		t.Errorf("the resolution shows the id's digits: %s", mustJSON(t, res))
	}
}
