package reconcile_test

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Attack (issue 50): a record collected before collect wrote the posted
// generation is DONE at generation 2 with its adoption line naming
// generation 1's posting (~1). judge trusts the line only when the single
// posting IS that key; when the statement's single posting is generation
// 2's (~2: the zombie delivery of generation 2 the collect raced did post,
// booked in the next period), current falls back to the record's
// generation, ~2 "matches", and a second debit of the customer is counted
// as matched: no break. The record says it holds ~1's money, not ~2's.
func TestAttack50LegacyCollectedRecordMatchesAnotherGenerationsPosting(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			b := newBooks(t, s, "A50L-")
			c := b.charge("legacy", 2500)
			key1 := b.collectedBeforeCollect(t, c)
			// The next statement: generation 1's posting was last period's;
			// this one has generation 2's alone.
			b.postings = nil
			b.post(c, 2, c.Amount.Minor, true)
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				t.Fatalf("record DONE holding %s's posting (its adoption line), the statement posts %s too: breaks %v, matched %d; "+
					"want a break (a second debit), not a match", key1, charge.BankKey(c.ID, 2), b.mine(rep), rep.Matched)
			}
		})
	}
}

// Attack (issue 50): a failed_but_posted break under a declined (earlier)
// generation is judged without checking the posting against the charge:
// the branch for p.BankKey != current never calls verify, and never sets
// Unverified. A posting under the declined key of ANOTHER amount (the
// narrative is there: it can be checked) is a failed_but_posted break, not
// an amount_mismatch, and resolve collects it: the record is DONE "posted"
// with the wrong amount recorded as the charge's collection. The same
// posting under the record's own generation is an amount_mismatch (and
// is not adopted).
//
// Under a WAITING record (attack 3g, issue 52) resolve does record it as
// collected — else the schedule's next attempt debits the customer again
// while the bank corrects the amount — but never as the charge's amount:
// the next run reports amount_mismatch on the DONE record until the bank's
// correction matches.
func TestAttack50DeclinedGenerationPostingOfAnotherAmountIsCollectedUnchecked(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name    string
			setup   func(t *testing.T, b *books, c charge.Charge)
			collect bool // resolve collects it (the record WAITING)
		}{
			{"WAITING", func(t *testing.T, b *books, c charge.Charge) {
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
			}, true},
			{"FAILED after a declined reopen", func(t *testing.T, b *books, c charge.Charge) {
				b.declinedAgainAtGeneration2(t, c)
			}, false},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "A50M-")
				c := b.charge("amount", 2500)
				tc.setup(t, b, c)
				b.post(c, 1, 999900, true) // 9999.00, not 25.00, under generation 1's key, narrative and all
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				if br == nil {
					t.Fatalf("no break: %v", b.mine(rep))
				}
				res, err := attackResolve(t, b, period, c.ID)
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if br.Kind != reconcile.AmountMismatch || (res.Action == "adopted") != tc.collect {
					t.Fatalf("a posting of 9999.00 for a 25.00 charge under its declined key: break %s (unverified %v); resolve %q %v; record %s %s %q; "+
						"want amount_mismatch, collected: %v", br.Kind, br.Unverified, res.Action, err, rec.State, rec.Status, rec.Detail, tc.collect)
				}
				if again := findBreak(b.run(t), c.ID); tc.collect && (again == nil || again.Kind != reconcile.AmountMismatch) {
					t.Fatalf("collected, the posting of 9999.00 is no longer a break (%v): taken for the charge's amount", again)
				}
			})
		}
	}
}

// The same branch never sets Unverified either: a posting under the
// declined key WITHOUT a narrative (it cannot be checked against the
// charge) is collected by a plain resolve, without the operator's
// --unverified (the same-generation FAILED case asks for it).
func TestAttack50DeclinedGenerationPostingWithoutNarrativeNeedsNoUnverified(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A50U-")
			c := b.waiting(t, "bare")
			b.post(c, 1, c.Amount.Minor, false)
			res, err := attackResolve(t, b, period, c.ID)
			if !errors.Is(err, reconcile.ErrUnchecked) {
				t.Fatalf("resolve of an uncheckable posting under the declined key, no --unverified: %q %v (unverified %v); want ErrUnchecked",
					res.Action, err, res.Break.Unverified)
			}
		})
	}
}

// A posting under a generation the record never reached (~3, the record
// FAILED at generation 1: the collector never sent that key) is judged
// failed_but_posted "which it had declined" and resolve collects it: the
// record jumps to DONE at generation 3, closing the charge on a debit it
// never presented (the run reports such a key as unknown_posting when no
// record exists).
func TestAttack50PostingUnderAGenerationNeverPresentedIsCollected(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A50F-")
			c := b.charge("future", 2500)
			b.failed(t, c) // declined at generation 1; never reopened
			b.post(c, 3, c.Amount.Minor, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil {
				br = &reconcile.Break{}
			}
			res, err := attackResolve(t, b, period, c.ID)
			rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
			if res.Action == "adopted" || rec.State == driver.StateDone {
				t.Fatalf("posting under %s, a key never sent (record at generation 1): break %s %q; resolve %q %v; record %s generation %d; want it not collected",
					charge.BankKey(c.ID, 3), br.Kind, br.Detail, res.Action, err, rec.State, rec.Generation)
			}
		})
	}
}
