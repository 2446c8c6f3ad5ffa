//go:build knowndefects

// Known defects, left for issue 52 (real statements): each test fails on
// the current code. Run them with go test -tags knowndefects ./reconcile.
//
//   - an amount_mismatch under a WAITING charge's declined generation: resolve
//     now refuses it (the break stays open, saying the record still debits),
//     but nothing stops the schedule's next debit while the bank corrects it.
package reconcile_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/reconcile"
)

// Attack 3g: the declined generation ~1 of a WAITING charge booked late
// of another amount is an amount_mismatch (attack 50), whose action is to
// have the bank "refund and post again, or adjust" — the bank adjusts it
// to the charge's amount, the money stays under ~1 — and Resolve MARKS
// it: the record stays WAITING and its next attempt debits ~2. The
// customer pays the charge twice.
func TestAttack3AmountMismatchOfAWaitingChargeAdjustedThenDebitedAgain(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3G-")
			bank := corebanksim.NewLedger(corebanksim.Faults{})
			c := b.charge("adjust", 2500)
			b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
			b.post(c, 1, 999900, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.AmountMismatch {
				t.Fatalf("want amount_mismatch, got %v", b.mine(rep))
			}
			res, err := attackResolve(t, b, period, c.ID)
			b.clock.Advance(25 * time.Hour)
			if out := deliver(t, b, bank, c); out != idempotency.DuplicateDone {
				n, keys := postingsOf(bank, c)
				t.Fatalf("amount_mismatch under the declined ~1 resolved (%q %v; action advised %q): the record stayed WAITING and its next attempt %s, debiting %v (%d) "+
					"on top of the ~1 posting the bank was told to adjust", res.Action, err, br.Action, out, keys, n)
			}
		})
	}
}
