package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// declinedTwice is c declined, reopened into generation 2 and declined
// again.
func (b *books) declinedTwice(t *testing.T, c charge.Charge) {
	t.Helper()
	b.failed(t, c)
	if _, err := b.guard.Reopen(t.Context(), c.ID, "retry", idempotency.ReopenOptions{NewGeneration: true}); err != nil {
		t.Fatal(err)
	}
	b.failed(t, c)
}

// A DONE DEBITED_NOTIFICATION_FAILED record renotified later: renotify's
// Amend moves UpdatedAt to the renotify, and the walk of the period goes by
// UpdatedAt. Renotified the same day (or the next day before the daily
// reconcile ran), the debit is never judged: not walked on its own day (its
// UpdatedAt is the renotify's, or it is "amended"), not walked on the
// renotify's day ("amended"). A debit recorded DONE that the bank never
// posted is hidden from every report.
func TestAttack2RenotifiedRecordNeverReconciled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // renotify this long after the debit (09:00)
	}{{"same day", 2 * time.Hour}, {"next morning before the reconcile", 16 * time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.New()
			b := newBooks(t, s, "ATK2-")
			c := b.charge("renotified", 2500)
			cl, err := b.guard.Claim(t.Context(), c.ID, c.Fingerprint(b.fp))
			if err != nil || !cl.Outcome.Owned() {
				t.Fatalf("claim: %v %v", cl.Outcome, err)
			}
			n, _ := charge.NoticeOf(c, charge.DebitReceipt{Reference: "REF-X"}, b.clock.Now()).Marshal()
			if err := b.guard.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), string(n)); err != nil {
				t.Fatal(err)
			}
			// The bank never posted it: the day's statement has only another charge.
			other := b.charge("other", 100)
			b.done(t, other)
			b.post(other, 1, 100, true)

			b.clock.Advance(tc.after)
			rec, _ := s.Get(t.Context(), c.ID, b.clock.Now())
			if _, err := s.Amend(t.Context(), driver.AmendRequest{Key: rec.Key, Token: rec.Token, FromStatus: rec.Status, Status: string(charge.Debited),
				Detail: "REF-X", History: append(rec.History, "renotified "+b.clock.Now().UTC().Format(time.RFC3339)+" by ops on sms: notice sent; was DEBITED_NOTIFICATION_FAILED; why: x"),
				Now: b.clock.Now()}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Hour) // the daily reconcile runs after
			found := false
			for _, p := range []statement.Period{period, {From: period.To, To: period.To.AddDate(0, 0, 1)}} {
				rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: s, Fingerprints: b.fp, Period: p, Now: b.clock.Now()}, b.postings_())
				if err != nil {
					t.Fatal(err)
				}
				if findBreak(rep, c.ID) != nil {
					found = true
				}
			}
			if !found {
				t.Fatalf("%s is DONE (debited 25.00, notice renotified %s later) and no statement posted it: neither its day's nor the renotify's day's report has a recorded_not_posted break", c.ID, tc.after)
			}
		})
	}
}

// The adoption records the posting it adopts by scanning every posting
// read under the key and keeping the LAST non-reversal one — not the one
// that stands after pairing, which is the one Run checked against the
// fingerprint. A statement with the good posting first, then a wrong one
// (another account, another amount) that the bank reversed: Run checks the
// good one, the break is posted_not_recorded, and the adoption writes the
// reversed posting's reference, amount and account into the record and
// the notice kept for renotify.
func TestAttack2AdoptionRecordsTheReversedPosting(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "adopt", (*books).crashed)
	good := b.post(c, 1, 2500, true)
	bad := b.post(c, 1, 99900, true)
	bad.Account = "009999999999"
	b.postings[len(b.postings)-1] = bad
	b.reverse(bad)
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != reconcile.PostedNotRecorded {
		t.Fatalf("want posted_not_recorded, got %+v", br)
	}
	res, err := attackResolve(t, b, period, c.ID)
	if err != nil || res.Action != "adopted" {
		t.Fatalf("resolve: %v %v", res.Action, err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	ref := charge.ReferenceOf(rec.Status, rec.Detail)
	n, _ := charge.PendingNotice(rec.Status, rec.Detail)
	if ref != good.Reference || n.Amount.Minor != 2500 || n.Account != charge.MaskAccount(c.AccountID) {
		t.Fatalf("adopted %s with reference %q (want the standing posting's %q), notice amount %d to %s (the charge is 2500 to %s): the reversed posting was recorded; history %q",
			c.ID, ref, good.Reference, n.Amount.Minor, n.Account, charge.MaskAccount(c.AccountID), rec.History)
	}
}

// The same with a posting outside the period: Resolve's kept list is
// filled before Run drops the postings booked outside the period, so a
// posting Run left out ("booked outside the period") is the one adopted.
func TestAttack2AdoptionRecordsAPostingOutsideThePeriod(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "adoptout", (*books).crashed)
	good := b.post(c, 1, 2500, true)
	bad := b.post(c, 1, 4400, true)
	bad.BookingDate = day.AddDate(0, 0, -3)
	b.postings[len(b.postings)-1] = bad
	res, err := attackResolve(t, b, period, c.ID)
	if err != nil || res.Action != "adopted" {
		t.Fatalf("resolve: %v %v", res.Action, err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if ref := charge.ReferenceOf(rec.Status, rec.Detail); ref != good.Reference {
		t.Fatalf("adopted %s with reference %q, not the period's posting %q: a posting booked outside the period (left out of the run) was recorded; history %q", c.ID, ref, good.Reference, rec.History)
	}
}

// reopenRace is a store on which a consumer's redelivery arrives right
// after a Reopen: what any delivery in flight does.
type reopenRace struct {
	*memstore.Store
	onReopen func()
}

func (s *reopenRace) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	rec, err := s.Store.Reopen(ctx, r)
	if err == nil && s.onReopen != nil {
		f := s.onReopen
		s.onReopen = nil
		f()
	}
	return rec, err
}

// A failed_but_posted break resolved as collected: Resolve Reopens the
// FAILED record (which makes it one "the next delivery claims at once"),
// then claims it to adopt. Between the two, a redelivery of the charge
// (a retry topic, a replay) claims the record and debits the customer a
// second time; the resolve then fails and leaves the consumer to it.
func TestAttack2CollectReopensForAConsumer(t *testing.T) {
	s := &reopenRace{Store: memstore.New()}
	b := newBooks(t, s, "ATK2-")
	c := b.charge("collect", 2500)
	b.failed(t, c)
	b.post(c, 1, 2500, true)
	consumer, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, Retention: 30 * 24 * time.Hour, Clock: b.clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got idempotency.Outcome
	s.onReopen = func() {
		cl, err := consumer.Claim(context.Background(), c.ID, c.Fingerprint(b.fp))
		if err == nil {
			got = cl.Outcome
		}
	}
	res, err := attackResolve(t, b, period, c.ID)
	if got.Owned() {
		t.Fatalf("while resolve collected %s's posting (%s, %v), a redelivery claimed the record (%s): the consumer debits the customer a second time", c.ID, res.Action, err, got)
	}
}

// A record FAILED at generation 2 (generation 1 declined, reopened into
// a new generation, which failed too). The bank posted generation 1 anyway
// and posted-then-reversed generation 2. What stands is generation 1's
// posting, under a declined key: failed_but_posted, "have the bank refund
// the posting under the declined key". But the break's BankKeys hold the
// current key (its reversed pair), so Resolve's default "collects" it:
// the record is reopened and adopted DONE with the REVERSED generation-2
// posting's reference. Once the bank refunds generation 1 as advised, the
// charge is DONE (never debited again) with no money collected.
func TestAttack2CollectAdoptsReversedCurrentGeneration(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK2-")
	c := b.charge("gen2", 2500)
	b.declinedTwice(t, c)
	if rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now()); rec.Generation != 2 {
		t.Fatalf("generation %d", rec.Generation)
	}
	b.post(c, 1, 2500, true)
	g2 := b.post(c, 2, 2500, true)
	b.reverse(g2)
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != reconcile.FailedButPosted {
		t.Fatalf("want failed_but_posted, got %+v", br)
	}
	// Fixed: what stands (generation 1's posting) is what is collected —
	// the default for a FAILED record the bank posted (the money kept; see
	// TestAttackResolvedFailedButPostedStaysReopenable, its declined
	// generation's row), and what the break
	// now advises — never generation 2's reversed posting.
	res, err := attackResolve(t, b, period, c.ID)
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if ref := charge.ReferenceOf(rec.Status, rec.Detail); err != nil || res.Action != "adopted" || rec.State != driver.StateDone || ref == g2.Reference || ref != "REF-"+c.ID {
		t.Fatalf("the declined generation 1 stands and generation 2 was reversed; resolve %s (%v): the record is %s %s reference %q (want generation 1's %q, never the reversed %q); history %q",
			res.Action, err, rec.State, rec.Status, ref, "REF-"+c.ID, g2.Reference, rec.History)
	}
}

// A bank's reference is text from outside, and banks put the account in it
// ("UPI/<account>/…", "NEFT-<account>-…"). Posted.Reference and the
// posted_not_recorded detail carry it as read; the text, CSV and JSON
// reports, and the adopted record (its reference, its notice, its history
// line) keep the customer's full account number. "Accounts are always
// masked" (reconciliation.md); charge.MaskText exists for such text.
func TestAttack2BankReferenceCarriesTheFullAccount(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "refacct", (*books).crashed)
	p := b.post(c, 1, 2500, true)
	p.Reference = "UPI/" + c.AccountID + "/771"
	b.postings[len(b.postings)-1] = p
	rep := b.run(t)
	text, csv, js := written(t, rep)
	for what, out := range map[string]string{"text": text, "csv": csv, "json": js} {
		if strings.Contains(out, c.AccountID) {
			t.Errorf("the %s report holds the full account %s (from the bank's reference)", what, c.AccountID)
		}
	}
	if _, err := attackResolve(t, b, period, c.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if strings.Contains(rec.Detail, c.AccountID) || strings.Contains(strings.Join(rec.History, "\n"), c.AccountID) {
		t.Errorf("the adopted record keeps the full account %s: detail %q, history %q", c.AccountID, rec.Detail, rec.History)
	}
}

// The break id (what a proposal freezes, and ResolveRequest.BreakID
// checks) leaves out the posting's account. An unverified adoption (no
// narrative: the operator and the approver checked the account by hand)
// proposed over a posting from the charge's account is run, after the
// statement changed, over a posting from ANOTHER account with the same
// key, amount, day and reference: the same id, so it adopts — the charge
// is recorded collected from a customer who was never debited.
//
// A record written with its summary compares the account's last four on
// every posting (the break is then amount_mismatch): the attack stands for
// a record written before summaries.
func TestAttack2BreakIDIgnoresTheAccount(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK2-")
	b.noSummary = true
	c := b.charge("acctswap", 2500)
	b.crashed(t, c)
	b.post(c, 1, 2500, false)
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != reconcile.PostedNotRecorded || !br.Unverified {
		t.Fatalf("want an unverified posted_not_recorded, got %+v", br)
	}
	frozen := br.ID
	b.postings[len(b.postings)-1].Account = "009999999999" // another customer's debit
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: c.ID, Kind: reconcile.PostedNotRecorded, Reason: "approved", Operator: "run", Guard: b.guard,
			BreakID: frozen, Unverified: true})
	if err == nil || res.Action == "adopted" {
		t.Fatalf("the break frozen was a posting from %s; the posting now is from ********9999; same break id %s → %s (%v)",
			charge.MaskAccount(c.AccountID), frozen, res.Action, err)
	}
}

// Reversals across two statements. Day 1: the charge posted twice —
// posted_twice, "have the bank refund every posting but one". Day 2: the
// bank's refund of the duplicate, a reversal. Day 2's report says
// recorded_not_posted, "the bank reversed its posting: the money is back
// with the customer … the billing system raises it again under a new
// charge id" — but one debit still stands (day 1's): following the advice
// charges the customer twice.
func TestAttack2RefundOfADuplicateReportedAsMoneyBack(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "dupfix", (*books).done)
	b.post(c, 1, 2500, true)
	dup := b.post(c, 1, 2500, true)
	day1 := b.run(t)
	if br := findBreak(day1, c.ID); br == nil || br.Kind != reconcile.PostedTwice {
		t.Fatalf("day 1: want posted_twice, got %+v", br)
	}
	// Day 2's statement: the duplicate's reversal only.
	rev := dup
	rev.Reversal, rev.BookingDate = true, day.AddDate(0, 0, 1)
	rep := b.runNextDay(t, rev)
	if br := findBreak(rep, c.ID); br != nil && br.Kind == reconcile.RecordedNotPosted {
		t.Fatalf("day 2: the duplicate refunded as advised is reported %s: %q / do: %q (one debit of 25.00 still stands, day 1's)", br.Kind, br.Detail, br.Action)
	}
}

// The bank corrects a posting: day 1 posts it, day 2 reverses it and posts
// it again (the same amount, a new reference). The customer paid once, the
// right amount. Day 2's report pairs the reversal with the NEW posting
// (the same amount; the reversal's reference is no posting's of this
// statement) and says recorded_not_posted, "the money is back with the
// customer … raise it again under a new charge id": a second charge.
func TestAttack2CorrectionAcrossStatementsReportedAsMoneyBack(t *testing.T) {
	b, c := oneCharge(t, "ATK2-", "corrected", (*books).done)
	first := b.post(c, 1, 2500, true)
	rev := first
	rev.Reversal, rev.BookingDate = true, day.AddDate(0, 0, 1)
	again := first
	again.Reference, again.BookingDate = "REF-CORRECTED", day.AddDate(0, 0, 1)
	rep := b.runNextDay(t, rev, again)
	if br := findBreak(rep, c.ID); br != nil && (br.Kind == reconcile.AmountMismatch || br.Kind == reconcile.RecordedNotPosted) {
		t.Fatalf("day 2: a reversal of day 1's 25.00 and a new posting of 25.00 (REF-CORRECTED, standing) reported %s: %q / do: %q", br.Kind, br.Detail, br.Action)
	}
}
