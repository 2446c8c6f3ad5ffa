package charge_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// Text from outside (a body's note, a bank's message) with another
// customer's account joined by '_' or ':' keeps its last four digits, as
// with '-'; times stay.
func TestAttack54MaskTextUnderscoreColonGroups(t *testing.T) {
	for in, want := range map[string]string{
		"paid from 9988_7766_5544":   "paid from ****_****_5544",
		"paid from 9988:7766:5544":   "paid from ****:****:5544",
		"at 2026-11-30 12:30:45 UTC": "at 2026-11-30 12:30:45 UTC",
		"at 2026-11-30T12:30:45Z":    "at 2026-11-30T12:30:45Z",
	} {
		if got := charge.MaskText(in); got != want {
			t.Errorf("MaskText(%q) = %q, want %q", in, got, want)
		}
	}
}
