package metrics

import "testing"

func TestReasonCodeIsBounded(t *testing.T) {
	for reason, want := range map[string]string{
		"invalid: invalid charge event: chargeId": "invalid", "conflict: reused": "conflict",
		"debit_failed: declined": "debit_failed", "duplicate_failed: x": "duplicate_failed",
		"something new": "other", "": "other",
	} {
		if got := ReasonCode(reason); got != want {
			t.Errorf("ReasonCode(%q) = %q, want %q", reason, got, want)
		}
	}
}
