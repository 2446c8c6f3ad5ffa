package operate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memstore"
)

// chargerecovery reopen's audit line shows the charge id and bank key as
// every view does (charge.ShowID): a charge id holding an account's
// digits keeps its last four there.
func TestAttack54MaskReopenAuditLine(t *testing.T) {
	const id = "CHG-001234567890"
	s := memstore.New()
	g, err := idempotency.NewGuard(s, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), id, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "debit declined: INSUFFICIENT_FUNDS"); err != nil {
		t.Fatal(err)
	}
	var out, audit bytes.Buffer
	if err := ReopenCharge(t.Context(), s, ReopenOptions{ID: id, Reason: "INC-1", Operator: "olga", NewAttempt: true, Out: &out, Audit: &audit}); err != nil {
		t.Fatal(err)
	}
	if a := audit.String(); strings.Contains(a, "12345678") || !strings.Contains(a, "CHG-********7890") {
		t.Errorf("the audit line: %s", a)
	}
}
