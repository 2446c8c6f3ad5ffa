package charge_test

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
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

// The history the policy writes must fit a record in every store
// (driver.MaxDetailBytes: "a record stays far below every store's item
// limit (DynamoDB's 400 KB), so that it can always be finished"). A cap
// of attempts is a flag (--retry-max-attempts) without a bound: at a few
// thousand attempts the WAITING write carries a history DynamoDB refuses,
// and the charge can never be finished (claimed again, declined again,
// refused again, for as long as the message lives).
func TestTheHistoryOfEveryAttemptTheCapAllowsFitsARecord(t *testing.T) {
	const itemLimit = 400_000
	p := charge.RetryPolicy{MaxAttempts: 4000, Jitter: charge.NoJitter,
		Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: time.Minute, Retries: 4000}}}
	if err := p.Validate(); err != nil {
		if !errors.Is(err, charge.ErrRetrySchedule) {
			t.Fatalf("refused with %v, want a RetryScheduleError", err)
		}
		return // refused: the operator is told
	}
	f := withPolicy(t, p)
	f.ledger.fail = func(charge.DebitRequest, int) error { return &charge.DeclineError{Code: "INSUFFICIENT_FUNDS"} }
	c := smsFee("CHG-BIG")
	var res charge.Result
	for range p.MaxAttempts + 1 {
		if res = f.svc.Process(t.Context(), c, nil); res.Outcome != charge.Waiting {
			break
		}
		f.clock.Advance(res.NotBefore.Sub(f.clock.Now()))
	}
	wantOutcome(t, res, charge.DebitFailed)
	r := f.record(t, c.ID)
	size := len(r.Detail) + len(r.Status)
	for _, l := range r.History {
		size += len(l)
	}
	if size > itemLimit-2*driver.MaxDetailBytes {
		t.Fatalf("accepted, and after %d attempts the record holds %d bytes of history and result: past DynamoDB's item limit (400 KB)", r.Generation, size)
	}
}
