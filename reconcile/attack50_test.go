package reconcile_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/reconcile"
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
			b.declinedAgainAtGeneration2(t, c)
			p1 := b.post(c, 1, c.Amount.Minor, true)
			rec, _ := s.Get(t.Context(), c.ID, b.clock.Now())
			now := b.clock.Now()
			line := reconcile.AdoptedLine + " " + now.Format(time.RFC3339) + " by op: posted " + p1.Amount.String() + " under " + p1.BankKey +
				", booked " + p1.BookingDate.Format(time.DateOnly) + ", reference " + p1.Reference + "; no debit; why: old"
			if _, err := s.Collect(t.Context(), driver.CollectRequest{Key: c.ID, From: driver.StateFailed, Token: rec.Token, Generation: 2,
				NewToken: "legacy", PostedGeneration: 2, Status: string(charge.Debited), Detail: p1.Reference,
				History: append(rec.History, line), Now: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			// The next statement: generation 1's posting was last period's;
			// this one has generation 2's alone.
			b.postings = nil
			b.post(c, 2, c.Amount.Minor, true)
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				t.Fatalf("record DONE holding %s's posting (its adoption line), the statement posts %s too: breaks %v, matched %d; "+
					"want a break (a second debit), not a match", p1.BankKey, charge.BankKey(c.ID, 2), b.mine(rep), rep.Matched)
			}
		})
	}
}
