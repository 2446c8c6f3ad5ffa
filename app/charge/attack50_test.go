package charge_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Attack (issue 50): a hard decline is never re-presented under a new key.
// The code is the bank's text, kept as sent (corebank's classify only
// masks and clips it): a bank that spells it in lower or mixed case, or
// with a space for the underscore inside, is not a hard decline here, and
// reopen --new-attempt re-presents a debit to a closed account / a
// cancelled mandate.
func TestAttack50HardDeclineSpellingsAreReopenable(t *testing.T) {
	for _, detail := range []string{
		"debit declined: ACCOUNT_CLOSED",              // control: refused
		"debit declined: account_closed",              // lower case
		"debit declined: Mandate_Cancelled: by payer", // mixed case
		"retries_exhausted: debit declined: stop_payment",
	} {
		t.Run(detail, func(t *testing.T) {
			r := driver.Record{Key: "CHG-1", State: driver.StateFailed, Detail: detail}
			if err := charge.EligibleForNewGeneration(r); err == nil {
				t.Fatalf("EligibleForNewGeneration(%q) = nil (code %q): a hard decline would be presented again under a new key", detail, charge.DeclineCode(detail))
			}
		})
	}
}
