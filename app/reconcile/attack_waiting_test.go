package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// declinedAndWaiting is what the retry schedule (--retry-declines
// INSUFFICIENT_FUNDS=24h×3) leaves after generation 1's decline: the
// record WAITING under generation 2 until the next attempt.
func (b *books) declinedAndWaiting(t *testing.T, c charge.Charge, until time.Time) {
	t.Helper()
	res, err := b.guard.Do(t.Context(), c.ID, c.Fingerprint(b.fp), func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, &idempotency.Wait{Until: until, Status: string(charge.RetryScheduled), NextGeneration: true,
			Detail: "next attempt (attempt 2 of 4, after INSUFFICIENT_FUNDS)"}
	}, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Waiting {
		t.Fatalf("decline of generation 1: %v %v", res.Outcome, err)
	}
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.State != driver.StateWaiting || rec.Generation != 2 {
		t.Fatalf("record %s generation %d, want WAITING generation 2", rec.State, rec.Generation)
	}
}

// waiting is a charge of 25.00 declined under generation 1 and WAITING
// under generation 2 for its next attempt, a day later.
func (b *books) waiting(t *testing.T, name string) charge.Charge {
	t.Helper()
	c := b.charge(name, 2500)
	b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
	return c
}

// The bank declined generation 1 (INSUFFICIENT_FUNDS) and the schedule
// put the charge WAITING for its next attempt under generation 2; then
// the bank's statement shows generation 1 posted after all (the break
// failed_but_posted exists for exactly this: "the bank posted generation
// 1, which it had declined"). With a retry schedule a declined generation
// is no longer an operator's rare reopen but every insufficient-funds
// charge, and the record WAITS while the statement comes in. Resolve's
// default (the money kept: collect it) must record the charge collected,
// as it does for a FAILED record; it only MARKED the break, the record
// stayed WAITING, and at its next attempt the schedule debited the
// customer a second time, under generation 2.
func TestAttackWaitingChargeWhoseDeclinedGenerationPostedIsDebitedAgain(t *testing.T) {
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "ATKW-")
			c := b.charge("waitgen1", 2500)
			next := b.clock.Now().Add(24 * time.Hour)
			b.declinedAndWaiting(t, c, next)
			b.post(c, 1, 2500, true) // the bank posted the declined generation 1

			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.FailedButPosted || br.State != string(driver.StateWaiting) {
				t.Fatalf("want failed_but_posted on the WAITING record, got %+v", br)
			}
			if !strings.Contains(br.Action, "WAITING") {
				t.Errorf("the break's action does not say what to do with a waiting charge (its next attempt debits again): %q", br.Action)
			}
			res, err := attackResolve(t, b, period, c.ID)
			rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
			if err != nil || res.Action != "adopted" || rec.State != driver.StateDone {
				t.Errorf("resolve (the money kept, not --refunded): %s (%v); the record is %s %s generation %d: want it collected (DONE)",
					res.Action, err, rec.State, rec.Status, rec.Generation)
			}

			// The schedule's next attempt comes.
			b.clock.Advance(25 * time.Hour)
			debits := 0
			out, err := b.guard.Do(t.Context(), c.ID, c.Fingerprint(b.fp), func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
				debits++ // the debit under charge.BankKey(c.ID, run.Generation)
				return idempotency.Done{Status: string(charge.Debited), Detail: "REF-" + charge.BankKey(c.ID, run.Generation)}, nil
			}, idempotency.DoOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if debits != 0 {
				t.Fatalf("the bank posted generation 1 and the operator resolved the break keeping the money; the next attempt debited again (%s): two debits of one charge",
					out.Outcome)
			}
		})
	}
}

// With --refunded (the bank gave generation 1's money back) the break is
// marked and the schedule goes on: the next attempt is the one debit.
func TestWaitingChargeRefundedDeclinedGenerationKeepsItsSchedule(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATKW-")
	c := b.waiting(t, "waitrefund")
	b.post(c, 1, 2500, true)
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: c.ID, Reason: "the bank refunded it", Operator: "op", Guard: b.guard, Refunded: true})
	if err != nil || res.Action != "marked" {
		t.Fatalf("resolve --refunded: %s %v", res.Action, err)
	}
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.State != driver.StateWaiting || rec.Generation != 2 {
		t.Fatalf("record %s generation %d, want WAITING generation 2 (its schedule kept)", rec.State, rec.Generation)
	}
}
