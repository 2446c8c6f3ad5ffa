package charge_test

import (
	"errors"
	"testing"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Whether a retry happens is the schedule's to say, not the jitter's: a
// rule whose delay is the whole window (INSUFFICIENT_FUNDS=30d×1 with the
// default 30-day window) is either refused or retries once, whatever the
// random draw — not accepted and then, for all but a draw of exactly 0,
// ended retries_exhausted after the first attempt.
func TestTheJitterDoesNotDecideWhetherARetryHappens(t *testing.T) {
	rule := charge.RetryRule{Code: "INSUFFICIENT_FUNDS", Delay: 30 * day, Retries: 1}
	if err := (&charge.RetryPolicy{Rules: []charge.RetryRule{rule}}).Validate(); err != nil {
		if !errors.Is(err, charge.ErrRetrySchedule) {
			t.Fatalf("refused with %v, want a RetryScheduleError", err)
		}
		return // refused: the operator is told
	}
	for _, draw := range []float64{0, 0.5, 0.99} {
		f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{rule}, Rand: func() float64 { return draw }})
		f.ledger.fail = func(charge.DebitRequest, int) error { return &charge.DeclineError{Code: "INSUFFICIENT_FUNDS"} }
		c := smsFee("CHG-JW")
		wantOutcome(t, deliverUntilFinal(t, f, c), charge.DebitFailed)
		if r := f.record(t, c.ID); r.State != driver.StateFailed || totalCalls(f) != 2 {
			t.Errorf("draw %v: accepted, and %d debit attempt(s), want 2\nhistory %q", draw, totalCalls(f), r.History)
		}
	}
}
