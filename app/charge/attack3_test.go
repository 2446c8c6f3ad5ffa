package charge_test

import (
	"errors"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Attack 3f: HardDecline "normalises case and spaces", but only trims the
// ends: a bank that spells the code with a space or a hyphen between its
// words ("Account Closed", "account-closed") is a soft decline, and
// EligibleForNewGeneration lets an operator present the charge again
// under a new key (a re-presentment after a hard decline: scheme fines,
// a closed account debited).
func TestAttack3HardDeclineSpellings(t *testing.T) {
	for _, code := range []string{"account_closed", " Stop_Payment ", "Account Closed", "ACCOUNT-CLOSED", "stop payment", "Mandate  Cancelled"} {
		t.Run(code, func(t *testing.T) {
			rec := driver.Record{Key: "CHG-1", State: driver.StateFailed, Detail: (&charge.DeclineError{Code: code}).Error()}
			if err := charge.EligibleForNewGeneration(rec); !errors.Is(err, charge.ErrHardDecline) {
				t.Fatalf("declined %q: EligibleForNewGeneration %v; want ErrHardDecline", code, err)
			}
		})
	}
}
