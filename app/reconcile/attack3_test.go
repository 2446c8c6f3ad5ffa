package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// earlier is p as booked in an earlier statement: taken out of this one
// (its reversal may still be in it).
func (b *books) earlier(p statement.Posting) {
	for i := len(b.postings) - 1; i >= 0; i-- {
		if b.postings[i].Reference == p.Reference && !b.postings[i].Reversal {
			b.postings = append(b.postings[:i], b.postings[i+1:]...)
			return
		}
	}
}

// doneAtGeneration2 is a charge declined under generation 1, reopened into
// generation 2 by an operator, and debited under generation 2: DONE at 2.
func (b *books) doneAtGeneration2(t *testing.T, c charge.Charge) {
	t.Helper()
	b.atGeneration2(t, c, b.done, driver.StateDone)
}

// atGeneration2 is a charge declined under generation 1 (FAILED), reopened
// by an operator into generation 2, and finished there by second: want at
// generation 2.
func (b *books) atGeneration2(t *testing.T, c charge.Charge, second func(*testing.T, charge.Charge), want driver.State) {
	t.Helper()
	b.failed(t, c)
	if _, err := b.guard.Reopen(t.Context(), c.ID, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	second(t, c)
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.State != want || rec.Generation != 2 {
		t.Fatalf("record %s generation %d, want %s generation 2", rec.State, rec.Generation, want)
	}
}

// Attack 3a: a WAITING record is at the generation of its NEXT attempt
// (declinedAndWaiting: generation 2, key ~2 never presented). A posting
// under that key is a posting under the record's "own" key, so judge
// skips the new other-key rules (unknown_posting for a generation never
// presented) and falls to the final switch, whose default case is DONE:
// the charge is counted as matched, no break. The statement says money
// moved under a key the collector never sent, and the record is still
// WAITING to debit.
func TestAttack3WaitingRecordsUnpresentedKeyPostingCountsAsMatched(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3W-")
			c := b.waiting(t, "waiting")
			b.post(c, 2, c.Amount.Minor, true) // ~2: the key of the attempt not yet made
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				t.Fatalf("record %s generation %d (its next attempt not made), the bank posted %s: breaks %v, matched %d; "+
					"want a break (a key never presented, and the record not DONE), not a match",
					rec.State, rec.Generation, charge.BankKey(c.ID, 2), b.mine(rep), rep.Matched)
			}
		})
	}
}

// Attack 3b: a DONE record with exactly one posting standing under
// another key than its own, its own posting reversed (this statement, or
// a reversal of an earlier statement's posting). One debit stands for the
// charge, but judge only looks at the one standing posting: it is a
// posted_twice "the record's own stands" advising the refund of the only
// money the bank holds for the charge. Followed, the customer paid
// nothing and the record is DONE (never debited again).
func TestAttack3OwnPostingReversedOtherKeyStandsAdvisedRefunded(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name string
			// setup returns the key of the posting left standing.
			setup func(t *testing.T, b *books, c charge.Charge) string
		}{
			{"collected ~1 reversed, ~2 posted", func(t *testing.T, b *books, c charge.Charge) string {
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
				p1 := b.post(c, 1, c.Amount.Minor, true)
				if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
					t.Fatalf("collect ~1: %s %v", res.Action, err)
				}
				// The next statement: the bank reverses ~1 (it had
				// declined it) and generation 2's (zombie) debit posts.
				b.postings = nil
				b.reverse(p1)
				return b.post(c, 2, c.Amount.Minor, true).BankKey
			}},
			{"debited ~2 reversed (earlier statement), declined ~1 booked", func(t *testing.T, b *books, c charge.Charge) string {
				b.doneAtGeneration2(t, c)
				p2 := b.post(c, 2, c.Amount.Minor, true)
				b.earlier(p2) // booked in an earlier statement
				b.reverse(p2) // reversed in this one
				return b.post(c, 1, c.Amount.Minor, true).BankKey
			}},
			{"debited ~2 posted and reversed here, declined ~1 booked", func(t *testing.T, b *books, c charge.Charge) string {
				b.doneAtGeneration2(t, c)
				p2 := b.post(c, 2, c.Amount.Minor, true)
				b.reverse(p2)
				return b.post(c, 1, c.Amount.Minor, true).BankKey
			}},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "A3R-")
				c := b.charge("rev", 2500)
				standing := tc.setup(t, b, c)
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				if br == nil {
					return // nothing advised: no refund of the one debit
				}
				if br.Kind == reconcile.PostedTwice || strings.Contains(br.Action, "refund the posting under "+standing) {
					t.Fatalf("the record's own posting is reversed, one posting (%s) stands: break %s %q, action %q; "+
						"want no advice to refund the only debit standing (the customer would have paid nothing)", standing, br.Kind, br.Detail, br.Action)
				}
			})
		}
	}
}

// Attack 3c: a posted_twice break of a record that is NOT DONE (WAITING
// after generation 1's decline, the bank booked ~1 twice; FAILED at 2
// after a declined reopen, the bank booked both ~1 and ~2). The action is
// "have the bank refund every posting but one" — so one stays, the charge
// is paid — but Resolve only MARKS a posted_twice break: the record stays
// WAITING (its next attempt debits ~2) or FAILED (reopenable for ~3), and
// the statement that showed the posting is never read again. The customer
// is debited again on top of the posting kept.
func TestAttack3PostedTwiceOfAnOpenRecordIsMarkedAndDebitedAgain(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name+"/WAITING, ~1 booked twice", func(t *testing.T) {
			b := newBooks(t, open(t), "A3T-")
			bank := corebanksim.NewLedger(corebanksim.Faults{})
			c := b.waiting(t, "twice")
			bankPosted(t, b, bank, c, 1)
			b.post(c, 1, c.Amount.Minor, true) // booked a second time (the statement's)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.PostedTwice {
				t.Fatalf("want posted_twice, got %v", b.mine(rep))
			}
			res, err := attackResolve(t, b, period, c.ID)
			rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
			t.Logf("resolve: %q %v; record %s generation %d", res.Action, err, rec.State, rec.Generation)
			b.clock.Advance(25 * time.Hour)
			out := deliver(t, b, bank, c)
			if out != idempotency.DuplicateDone {
				n, keys := postingsOf(bank, c)
				t.Fatalf("posted_twice resolved (%q %v) over a WAITING record: the next attempt %s, the ledger has %d postings (%v) plus the statement's second ~1; "+
					"the bank refunds one as advised and the customer still paid twice", res.Action, err, out, n, keys)
			}
		})
		t.Run(name+"/FAILED at 2, ~1 and ~2 both booked", func(t *testing.T) {
			b := newBooks(t, open(t), "A3T-")
			c := b.charge("both", 2500)
			b.declinedAgainAtGeneration2(t, c)
			b.post(c, 1, c.Amount.Minor, true)
			b.post(c, 2, c.Amount.Minor, true)
			b.wantBreak(t, c, reconcile.PostedTwice)
			res, err := attackResolve(t, b, period, c.ID)
			if err == nil {
				_, rerr := b.guard.Reopen(t.Context(), c.ID, "customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op", Eligible: charge.EligibleForNewGeneration})
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if rec.State != driver.StateDone {
					t.Fatalf("posted_twice of a FAILED record resolved (%q): the record is %s generation %d (reopen: %v) — the posting kept is recorded nowhere, "+
						"and the charge is open to a third debit under %s", res.Action, rec.State, rec.Generation, rerr, charge.BankKey(c.ID, rec.Generation))
				}
			}
		})
	}
}

// Attack 3d: a DONE record (debited under ~2) and the bank books the
// declined ~1 late, of ANOTHER amount. verify runs before the DONE check,
// so this second debit is an amount_mismatch whose action is to have the
// bank "refund and post again, or adjust": the bank posts the charge
// again (or adjusts it to the charge's amount) and the customer pays the
// charge twice. A second debit of a DONE charge is to be refunded whole.
func TestAttack3SecondDebitOfAnotherAmountAdvisedPostedAgain(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3A-")
			c := b.charge("amt", 2500)
			b.doneAtGeneration2(t, c)
			p2 := b.post(c, 2, c.Amount.Minor, true)
			b.earlier(p2)
			b.post(c, 1, 999900, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil {
				t.Fatalf("no break: %v", b.mine(rep))
			}
			if strings.Contains(br.Action, "post again") || strings.Contains(br.Action, "adjust") {
				t.Fatalf("DONE under ~2, the bank also booked ~1 (9999.00): break %s %q, action %q; want it refunded whole (a second debit), not posted again or adjusted",
					br.Kind, br.Detail, br.Action)
			}
		})
	}
}

// Attack 3e: a collection records the bank's reference MASKED (the
// account in "UPI/<account>/…" is starred), and the record's reference is
// what a later reversal is matched against (reversesRecorded). The bank
// reverses the very posting collected, in the next statement, under its
// real reference: it does not equal the masked one, so the run files it
// as "a refunded duplicate; nothing to do" (a note) — no break. The
// customer has the money back and the record is DONE, never collected.
func TestAttack3ReversalOfACollectedPostingWithAccountInReferenceIsANote(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3M-")
			c := b.waiting(t, "masked")
			p1 := b.post(c, 1, c.Amount.Minor, true)
			p1.Reference = "UPI/" + c.AccountID + "/771"
			b.postings[len(b.postings)-1] = p1
			if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
				t.Fatalf("collect ~1: %s %v", res.Action, err)
			}
			b.postings = nil
			b.reverse(p1) // the next statement: the collected posting reversed
			rep := b.run(t)
			if br := findBreak(rep, c.ID); br == nil {
				t.Fatalf("the one posting collected is reversed: no break (notes %q); want recorded_not_posted (the money is back with the customer)", rep.Notes)
			}
		})
	}
}

// Attack 3h (issue 52's known defects, fixed): an operator's reopen
// --new-attempt leaves the record claimable at generation 2 before any
// delivery presents ~2 (the history's last line is the reopen's, the lease
// never taken since). A posting under ~2 then is under a key the collector
// never sent: unknown_posting, and resolve does not adopt it (it was
// posted_not_recorded and adopted: the charge closed DONE on a debit
// nobody of ours made). Once a delivery has claimed ~2 (and died after
// its debit), the same posting is the record's own: posted_not_recorded,
// adopted.
func TestAttack3ReopenedGenerationPostedBeforeItIsPresented(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name      string
			presented bool
			want      reconcile.Kind
			action    string
			state     driver.State
		}{
			{"never presented", false, reconcile.UnknownPosting, "marked", driver.StateInProgress},
			{"presented by a delivery that died after its debit", true, reconcile.PostedNotRecorded, "adopted", driver.StateDone},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "A3H-")
				c := b.charge("reopened", 2500)
				b.failed(t, c)
				if _, err := b.guard.Reopen(t.Context(), c.ID, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"}); err != nil {
					t.Fatal(err)
				}
				if tc.presented {
					if cl, err := b.guard.Claim(t.Context(), c.ID, c.Fingerprint(b.fp)); err != nil || !cl.Outcome.Owned() || cl.Record.Generation != 2 {
						t.Fatalf("claim after the reopen: %v %v generation %d", cl.Outcome, err, cl.Record.Generation)
					}
					b.clock.Advance(2 * time.Minute) // the delivery died; its lease passed
				}
				b.post(c, 2, c.Amount.Minor, true)
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				if br == nil || br.Kind != tc.want {
					t.Fatalf("breaks %v, want %s", b.mine(rep), tc.want)
				}
				res, err := attackResolve(t, b, period, c.ID)
				if err != nil || res.Action != tc.action {
					t.Fatalf("resolve: %q %v, want %q", res.Action, err, tc.action)
				}
				after, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if after.State != tc.state || after.Generation != 2 {
					t.Fatalf("record %s generation %d after resolve, want %s generation 2", after.State, after.Generation, tc.state)
				}
			})
		}
	}
}

// Attack 3g (issue 52's known defects, fixed): the declined generation ~1
// of a WAITING charge booked late of another amount is an amount_mismatch
// (attack 50), whose action is to have the bank correct it — the bank
// adjusts it to the charge's amount, the money stays under ~1. Resolve
// refused it and the record stayed WAITING: its next attempt debited ~2,
// the customer paying the charge twice. Now resolve records the ~1
// posting as collected (DONE at generation 1: the schedule ends, its next
// delivery is a duplicate and debits nothing), and the amount is not taken
// for the charge's: the next run still reports amount_mismatch on the DONE
// record until the bank's correction matches the charge; once it does
// (the statement's posting of 25.00), it matches.
func TestAttack3AmountMismatchOfAWaitingChargeIsCollectedAndStaysABreak(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A3G-")
			bank := corebanksim.NewLedger(corebanksim.Faults{})
			c := b.waiting(t, "adjust")
			b.post(c, 1, 999900, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil || br.Kind != reconcile.AmountMismatch || !br.Collects(false) || br.Collects(true) {
				t.Fatalf("want amount_mismatch that resolve collects (and --refunded marks), got %v", b.mine(rep))
			}
			if !strings.Contains(br.Action, "WAITING") || !strings.Contains(br.Action, "debits the customer again") {
				t.Fatalf("action %q: want it to say the schedule debits again unless resolved", br.Action)
			}
			res, err := attackResolve(t, b, period, c.ID)
			if err != nil || res.Action != "adopted" || res.Record == nil || res.Record.State != driver.StateDone || res.Record.Generation != 1 {
				t.Fatalf("resolve: %q %v %+v; want the ~1 posting collected (DONE at generation 1)", res.Action, err, res.Record)
			}
			if strings.Contains(res.Record.Detail, "999900") || !strings.Contains(res.Record.History[len(res.Record.History)-1], "no notice built") {
				t.Fatalf("collected with detail %q, history %q: want no notice built from the posting of another amount", res.Record.Detail, res.Record.History[len(res.Record.History)-1])
			}
			b.clock.Advance(25 * time.Hour)
			if out := deliver(t, b, bank, c); out != idempotency.DuplicateDone {
				n, keys := postingsOf(bank, c)
				t.Fatalf("the next delivery %s, debiting %v (%d): want a duplicate of the DONE record, no debit", out, keys, n)
			}
			if n, _ := postingsOf(bank, c); n != 0 {
				t.Fatalf("the bank was debited %d time(s) after the collection", n)
			}
			// The same statement: the wrong amount is still a break.
			again := b.run(t)
			if br := findBreak(again, c.ID); br == nil || br.Kind != reconcile.AmountMismatch || br.State != string(driver.StateDone) {
				t.Fatalf("after the collection, the posting of 9999.00 stands: breaks %v, want amount_mismatch on the DONE record", b.mine(again))
			}
			// The bank's correction: the posting now of the charge's amount.
			b.postings[len(b.postings)-1].Amount.Minor = c.Amount.Minor
			if fixed := b.run(t); findBreak(fixed, c.ID) != nil {
				t.Fatalf("the posting corrected to 25.00: breaks %v, want it matched", b.mine(fixed))
			}
		})
	}
}
