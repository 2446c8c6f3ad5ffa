package charge_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// Digits of another script (full-width) read as the account by a person:
// an id outside the id's form is masked as its ASCII digits would be.
func TestAttack54MaskFullWidthDigits(t *testing.T) {
	id := "CHG-００１２３４５６７８９０"
	for name, show := range map[string]func(string, ...string) string{"ShowID": charge.ShowID, "ShowRef": charge.ShowRef} {
		got := show(id)
		if strings.Contains(got, "３４５６７８") {
			t.Errorf("%s(%q) = %q: full-width digits shown", name, id, got)
		}
	}
}

// The same in any text from outside (a body, a bank's message).
func TestAttack54MaskFullWidthText(t *testing.T) {
	got := charge.MaskText("account ００１２３４５６７８９０ and ٠٠١٢٣٤٥٦٧٨٩٠", "001234567890")
	if want := "account ********7890 and ********7890"; got != want {
		t.Errorf("MaskText = %q, want %q", got, want)
	}
}
