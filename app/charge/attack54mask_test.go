package charge_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// digitsOf is s's ASCII digits, separators and all else skipped.
func digitsOf(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The message's own account, written in groups, is the account: an id or
// a reference holding it grouped must not show it (issue 54 item 2 attack).
func TestAttack54MaskGroupedOwnAccount(t *testing.T) {
	for _, tt := range []struct{ id, account string }{
		{"CHG-123-4567", "1234567"},             // an account shorter than 8, grouped
		{"CHG-2026-11-30-1234", "202611301234"}, // an account read as a date and four
		{"REF-0012-3456-7890", "001234567890"},  // the posting's account, grouped
		{"CHG_0012_3456_7890", "001234567890"},  // '_' joins groups in an id
		{"CHG:0012:3456:7890", "001234567890"},  // ':' too
	} {
		for name, show := range map[string]func(string, ...string) string{"ShowID": charge.ShowID, "ShowRef": charge.ShowRef} {
			got := show(tt.id, tt.account)
			if strings.Contains(digitsOf(got), tt.account) {
				t.Errorf("%s(%q, %q) = %q: the account is shown", name, tt.id, tt.account, got)
			}
			if !strings.HasSuffix(digitsOf(got), tt.account[len(tt.account)-4:]) {
				t.Errorf("%s(%q, %q) = %q: its last four are not kept", name, tt.id, tt.account, got)
			}
		}
		if got := charge.MaskText("see "+tt.id+" now", tt.account); strings.Contains(digitsOf(got), tt.account) {
			t.Errorf("MaskText(%q, %q) = %q: the account is shown", tt.id, tt.account, got)
		}
	}
}
