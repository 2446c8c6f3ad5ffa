package charge_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// Digits joined by '_' or ':' are one number in an id, as '-' joins them:
// another customer's account so written is masked as "CHG-0012-3456-7890".
func TestAttack54MaskUnderscoreColonGroups(t *testing.T) {
	for _, id := range []string{"CHG_0012_3456_7890", "CHG:0012:3456:7890", "X_001234_567890"} {
		got := charge.ShowID(id)
		if strings.Contains(digitsOf(got), "12345678") || strings.Contains(digitsOf(got), "00123456") {
			t.Errorf("ShowID(%q) = %q: 8+ digits of a number shown", id, got)
		}
	}
	// Ids as issued stay whole.
	for _, id := range []string{"CHG-2026-11-000123", "CHG_2026_11_30_0001", "CHG:42", "CHG-2026-11-30-0001"} {
		if got := charge.ShowID(id); got != id {
			t.Errorf("ShowID(%q) = %q, want it whole", id, got)
		}
	}
}
