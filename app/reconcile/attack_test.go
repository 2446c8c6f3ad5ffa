package reconcile_test

import (
	"context"
	"fmt"
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

func attackResolve(t *testing.T, b *books, p statement.Period, id string) (reconcile.Resolved, error) {
	t.Helper()
	return reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: p, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: id, Reason: "attack", Operator: "mallory", Guard: b.guard})
}

// crashed is c claimed by a consumer that died in the debit: its lease
// has passed.
func (b *books) crashed(t *testing.T, c charge.Charge) {
	t.Helper()
	b.claimed(t, c)
	b.clock.Advance(2 * time.Minute)
}

// runNextDay is the run of the day after period over postings (the next
// day's statement), a day later.
func (b *books) runNextDay(t *testing.T, postings ...statement.Posting) reconcile.Report {
	t.Helper()
	b.postings = postings
	b.clock.Advance(24 * time.Hour)
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp,
		Period: statement.Period{From: period.To, To: period.To.AddDate(0, 0, 1)}, Now: b.clock.Now()}, b.postings_())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// wantNoSecondDebit wants c, whose debit the bank posted, refused a reopen
// into a new generation; else it fails with why, the record's state and
// generation after it.
func (b *books) wantNoSecondDebit(t *testing.T, c charge.Charge, why string) {
	t.Helper()
	if _, err := b.guard.Reopen(t.Context(), c.ID, "customer funded the account", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err == nil {
		rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
		t.Fatalf("%s: %s gen %d", why, rec.State, rec.Generation)
	}
}

func findBreak(rep reconcile.Report, id string) *reconcile.Break {
	for i := range rep.Breaks {
		if rep.Breaks[i].ChargeID == id {
			return &rep.Breaks[i]
		}
	}
	return nil
}

// toolClaim is a tool's claim of its own internal key (a renotify's).
func (b *books) toolClaim(t *testing.T, key string) idempotency.Claim {
	t.Helper()
	cl, err := b.guard.Claim(t.Context(), key, "notice")
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	return cl
}

// A posting whose bank key is a tool's own internal key ("_renotify/…",
// "_reconcile/…") is read as a charge: Run Gets the internal record, finds
// it DONE and counts the posting as matched. No charge key ever starts
// with "_" (driver.InternalKeyPrefix): it is an unknown posting, a debit
// the collector never sent, and must be reported.
func TestAttackPostingUnderInternalKeyCountsAsMatched(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	key := "_renotify/ATK-1"
	cl := b.toolClaim(t, key)
	if err := b.guard.Complete(t.Context(), cl.Lease(), "SENT", "ok"); err != nil {
		t.Fatal(err)
	}
	b.postAs(key, "BANK-1")
	rep := b.run(t)
	// Not a key the collector sends: shown masked (ShowKey).
	if br := findBreak(rep, reconcile.ShowKey(key)); br == nil || br.Kind != reconcile.UnknownPosting || br.ChargeID != "***********TK-1" {
		t.Fatalf("a posting under the internal key %s: breaks %+v, matched %d; want an unknown_posting break", key, rep.Breaks, rep.Matched)
	}
}

// Worse: a tool's claim left IN_PROGRESS (a renotify that crashed) plus a
// bank posting under that key is a posted_not_recorded break, and Resolve
// "adopts" it: the tool's internal record is completed DONE DEBITED.
func TestAttackResolveAdoptsInternalToolClaim(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	key := "_renotify/ATK-2"
	b.toolClaim(t, key)
	b.clock.Advance(2 * time.Minute) // the tool's lease passes
	b.postAs(key, "BANK-2")
	// Fixed: the posting is an unknown one (no record read), which a
	// resolve may mark; the tool's record is never touched.
	res, err := attackResolve(t, b, period, key)
	rec, _ := b.store.Get(t.Context(), key, b.clock.Now())
	if (err == nil && (res.Action != "marked" || res.Break.Kind != reconcile.UnknownPosting)) || rec.State != driver.StateInProgress || rec.Status != "" {
		t.Fatalf("Resolve of internal key %s: %s %s (%v); the tool's record is now %s %s %q", key, res.Action, res.Break.Kind, err, rec.State, rec.Status, rec.Detail)
	}
}

// Reversals that do not bring the charge back to one debit of its amount
// hide nothing. Two postings of 25.00 under the charge's key and one
// reversal of 1.00: the customer paid 49.00 for a 25.00 charge (Run netted
// postings by count, whatever the amounts: one stood, it matched, the
// report was clean). Reversals are paired with postings by count, not by
// amount: 99.99 posted in error, 25.00 posted, and the bank reverses the
// 25.00. The 99.99 stands on the customer's account, but the run checked
// the last posting (25.00), found it the charge's and reported a match.
func TestAttackReversalsHideNoDebit(t *testing.T) {
	for _, tc := range []struct {
		name, charge string
		posted       []int64 // the postings' amounts, in order
		reverse      int     // the posting reversed
		reversed     int64   // the reversal's amount
		what         string
	}{
		{"a partial reversal of a double debit", "double", []int64{2500, 2500}, 0, 100,
			"49.00 net debited for a 25.00 charge (2 × 25.00 posted, 1.00 reversed)"},
		{"a reversal paired by position, not amount", "wrong-reversed", []int64{9999, 2500}, 1, 2500,
			"99.99 stands for a 25.00 charge (the 25.00 was reversed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), "ATK-")
			c := b.charge(tc.charge, 2500)
			b.done(t, c)
			var posted []statement.Posting
			for _, minor := range tc.posted {
				posted = append(posted, b.post(c, 1, minor, true))
			}
			r := posted[tc.reverse]
			r.Amount.Minor = tc.reversed
			b.reverse(r)
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				t.Fatalf("%s: no break; matched %d", tc.what, rep.Matched)
			}
		})
	}
}

// A resolution that was claimed but never completed (resolve crashed, or
// its Complete failed, or it is running right now) hides the break: the
// run drops any break whose resolution key merely exists, whatever its
// state.
func TestAttackUnfinishedResolutionHidesBreak(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	c := b.charge("lost", 2500)
	b.done(t, c) // DONE, never posted: recorded_not_posted
	other := b.charge("other", 100)
	b.done(t, other)
	b.post(other, 1, 100, true) // the day's statement is there: it has another charge
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil {
		t.Fatalf("no break for %s", c.ID)
	}
	key := reconcile.ResolutionPrefix + br.ChargeID + "/" + string(br.Kind) + "/" + br.ID
	cl, err := b.guard.Claim(t.Context(), key, br.ID) // the resolve process dies here
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	rec, _ := b.store.Get(t.Context(), key, b.clock.Now())
	if rec.State != driver.StateInProgress {
		t.Fatalf("resolution record %s, want IN_PROGRESS", rec.State)
	}
	again := b.run(t)
	if findBreak(again, c.ID) == nil {
		t.Fatalf("a resolution left IN_PROGRESS (no reason ever written) hides the break: breaks %d, resolved %d", len(again.Breaks), again.Resolved)
	}
}

// An IN_PROGRESS charge of 25.00 whose "posting" is 9,999.00 to some other
// account: Run says posted_not_recorded (it never checks the amount of an
// IN_PROGRESS record's posting), and Resolve adopts it — the charge is
// recorded DONE DEBITED with a posting that is not the charge's.
func TestAttackAdoptsPostingOfWrongAmountAndAccount(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "crashed", (*books).crashed)
	p := b.post(c, 1, 999900, true)
	b.postings[len(b.postings)-1].Account = "009999999999"
	_ = p
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil {
		t.Fatal("no break")
	}
	res, err := attackResolve(t, b, period, c.ID)
	if err == nil && res.Action == "adopted" {
		rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
		t.Fatalf("run said %s (not amount_mismatch); Resolve adopted a 9,999.00 posting to another account for a 25.00 charge: record %s %s %q",
			br.Kind, rec.State, rec.Status, rec.Detail)
	}
}

// The usual day: the statement of day D comes in on D+1, the operator
// adopts the crashed charge's posting on D+1. The record's UpdatedAt is
// now D+1, so D+1's run (whose statement rightly has no posting of it) reports
// it recorded_not_posted — and D's run never listed it as finished in D.
func TestAttackAdoptedNextDayComesBackAsRecordedNotPosted(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "crashed", (*books).claimed)
	b.post(c, 1, 2500, true)
	b.clock.Advance(24 * time.Hour) // D+1 09:00
	if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
		t.Fatalf("adopt: %v %v", res.Action, err)
	}
	next := statement.Period{From: period.To, To: period.To.AddDate(0, 0, 1)}
	b.postings = nil // D+1's statement: nothing of this charge (it was booked on D)
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: next, Now: b.clock.Now().Add(24 * time.Hour)}, b.postings_())
	if err != nil {
		t.Fatal(err)
	}
	if br := findBreak(rep, c.ID); br != nil {
		t.Fatalf("D+1's run: %s %s: %s (its posting was on D's statement, adopted on D+1)", br.Kind, br.ChargeID, br.Detail)
	}
}

// "X~0" is no key the collector ever sends (generations start at 2 after
// the bare id), yet it is filed under charge X: with X's own posting it
// makes X posted_twice, telling the operator to have one of X's debits
// refunded, instead of an unknown_posting of "X~0".
func TestAttackMalformedGenerationSuffixIsFiledUnderCharge(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "ok", (*books).done)
	b.post(c, 1, 2500, true)
	b.postings = append(b.postings, statement.Posting{BankKey: c.ID + "~0", Account: "007777777777", Amount: charge.Money{Minor: 500, Currency: "INR"},
		BookingDate: day, Reference: "SOMEONE-ELSE", Where: "test"})
	rep := b.run(t)
	if br := findBreak(rep, c.ID); br != nil {
		t.Fatalf("a posting under %q turned %s (matched) into %s: %s", c.ID+"~0", c.ID, br.Kind, br.Detail)
	}
}

// The text report prints bank-supplied text (references, keys) raw: a CSV
// export's reference with terminal escapes or a newline rewrites what the
// operator sees (here: clears the screen and forges "0 breaks").
func TestAttackTextReportPrintsControlCharacters(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	b.postAs("ATK-stranger", "R\x1b[2J\x1b[H\nperiod 2026-12-01 to 2026-12-02: 0 postings, 0 breaks\n")
	rep := b.run(t)
	out, _, _ := written(t, rep)
	if strings.ContainsRune(out, 0x1b) || strings.Contains(out, "\nperiod 2026-12-01 to 2026-12-02: 0 postings") {
		t.Fatalf("the text report carries the bank's control characters raw:\n%q", out)
	}
}

// Resolve with an empty charge id: opts.ChargeID "" means "no filter", so
// the run covers every charge and the one open break of the kind asked —
// another charge's — is marked resolved, under a request (and, on the
// command line, an audit line) that names charge "". A bank key "~2"
// (charge id "") gives such a break to resolve in the first place.
func TestAttackResolveEmptyChargeIDMarksAnotherChargesBreak(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	c := b.charge("lost", 2500)
	b.done(t, c) // recorded_not_posted
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: "", Kind: reconcile.RecordedNotPosted, Reason: "attack", Operator: "mallory", Guard: b.guard})
	if err == nil {
		t.Fatalf("Resolve(ChargeID \"\"): %s the break of %s", res.Action, res.Break.ChargeID)
	}
}

// failed_but_posted: the bank took the money of a charge recorded FAILED.
// Resolve only marks the break; the record stays FAILED (declined), so a
// reopen with a new attempt — the ordinary answer to a FAILED decline, and
// what the DLQ tooling offers — is still allowed and would debit the
// customer a second time under "<id>~2". The resolution closes the
// reconciliation break but leaves the double-debit path open.
//
// The same hole for a declined generation (the second review): generation
// 1 was declined, the record reopened into generation 2, which failed too;
// the bank posted generation 1 after all. The break is failed_but_posted
// ("or, if the later generation never posts, keep it"); Resolve without
// --refunded — the money kept — only MARKS it (the collect path wants the
// current key among the postings), the record stays FAILED, and a reopen
// into generation 3 debits the customer a second time.
func TestAttackResolvedFailedButPostedStaysReopenable(t *testing.T) {
	for _, tc := range []struct {
		name, prefix, charge string
		decline              func(b *books, t *testing.T, c charge.Charge)
		why                  string // %s: the resolve's action
	}{
		{"declined", "ATK-", "failed-posted", (*books).failed,
			"after failed_but_posted was resolved (%s), the charge the bank already posted was reopened for a second debit"},
		{"a declined generation kept", "ATK2-", "keptgen1", (*books).declinedTwice,
			"generation 1's posting kept (resolve %s, not --refunded), yet the charge reopens for another debit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBooks(t, memstore.New(), tc.prefix)
			c := b.charge(tc.charge, 2500)
			tc.decline(b, t, c)
			b.post(c, 1, 2500, true)
			res, err := attackResolve(t, b, period, c.ID)
			if err != nil || res.Break.Kind != reconcile.FailedButPosted {
				t.Fatalf("resolve: %v %+v", err, res)
			}
			b.wantNoSecondDebit(t, c, fmt.Sprintf(tc.why, res.Action))
		})
	}
}

// recorded_not_posted for a reversed debit advises "recover the charge
// again (reopen with a new attempt)", but a reopen only takes a FAILED
// record: the charge is DONE, the bank gave the money back, and no tool can
// collect it again (the fee is lost; the advice cannot be followed).
func TestAttackReversedDebitCannotBeRecoveredAsAdvised(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "reversed", (*books).done)
	b.reverse(b.post(c, 1, 2500, true))
	br := b.wantBreak(t, c, reconcile.RecordedNotPosted)
	// Fixed by the advice, not by a reopen: a DONE charge is never debited
	// again under its id (the guard's promise); the advice says so and
	// sends the fee back to billing under a new id.
	if _, err := b.guard.Reopen(t.Context(), c.ID, "the bank reversed the debit", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err == nil {
		t.Fatal("a DONE charge was reopened")
	}
	if strings.Contains(br.Action, "reopen") || !strings.Contains(br.Action, "new charge id") {
		t.Fatalf("the advice %q points at a reopen (refused for a DONE charge), not at billing's new charge id", br.Action)
	}
}

// A break of a charge DONE DEBITED_NOTIFICATION_FAILED is resolved; then
// the missed notice is sent again (renotify amends the record to DEBITED,
// same debit, same reference). The break's id digests the record's
// status, so the same statement now shows the resolved break again as a
// new one.
func TestAttackRenotifyResurrectsResolvedBreak(t *testing.T) {
	b := newBooks(t, memstore.New(), "ATK-")
	c := b.charge("notice-failed", 2500)
	cl, err := b.guard.Claim(t.Context(), c.ID, c.Fingerprint(b.fp))
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	notice, _ := charge.NoticeOf(c, charge.DebitReceipt{Reference: "REF-" + c.ID}, b.clock.Now()).Marshal()
	if err := b.guard.Complete(t.Context(), cl.Lease(), string(charge.DebitedNotificationFailed), string(notice)); err != nil {
		t.Fatal(err)
	}
	b.post(c, 1, 3000, true) // amount_mismatch
	b.wantBreak(t, c, reconcile.AmountMismatch)
	if _, err := attackResolve(t, b, period, c.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if _, err := b.store.(driver.Amender).Amend(t.Context(), driver.AmendRequest{Key: c.ID, Token: rec.Token, FromStatus: rec.Status,
		Status: string(charge.Debited), Detail: "REF-" + c.ID, History: []string{"notice sent again"}, Now: b.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	again := b.run(t)
	if br := findBreak(again, c.ID); br != nil {
		t.Fatalf("the resolved %s came back as break %s after the notice was sent again (resolved %d)", br.Kind, br.ID, again.Resolved)
	}
}

// An adoption records DEBITED — which means "the debit succeeded and the
// notification was sent" (charge.Debited) — for a consumer that died
// between the debit and DONE, i.e. most likely before it sent the
// customer's debit notice. renotify only picks DEBITED_NOTIFICATION_FAILED
// records, so the customer is never told of the debit.
func TestAttackAdoptionClaimsTheNoticeWasSent(t *testing.T) {
	b, c := oneCharge(t, "ATK-", "crashed", (*books).claimed)
	b.post(c, 1, 2500, true)
	b.clock.Advance(2 * time.Minute)
	res, err := attackResolve(t, b, period, c.ID)
	if err != nil || res.Action != "adopted" {
		t.Fatalf("adopt: %v %+v", err, res)
	}
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	if _, pending := charge.PendingNotice(rec.Status, rec.Detail); !pending {
		t.Fatalf("adopted record %s %s %q: recorded as notified (no notice pending for renotify), though no notice was sent", rec.State, rec.Status, rec.Detail)
	}
}

// Issue 51: a bank's reference holding bidirectional controls (U+202E
// reverses what follows, U+2066 opens an isolate) is shown escaped in the
// text report and the CSV, never raw.
func TestReportEscapesBidirectionalControls(t *testing.T) {
	b := newBooks(t, memstore.New(), "BIDI-")
	b.postAs("BIDI-stranger", "REF\u202e1-GHC\u2066x")
	rep := b.run(t)
	text, csv, _ := written(t, rep)
	for name, out := range map[string]string{"text": text, "csv": csv} {
		if strings.ContainsAny(out, "\u202e\u2066") || !strings.Contains(out, `REF\u202e1-GHC\u2066x`) {
			t.Errorf("the %s report does not show the reference escaped:\n%s", name, out)
		}
	}
}

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
	b.wantBreak(t, c, reconcile.PostedNotRecorded)
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
	b.wantBreak(t, c, reconcile.FailedButPosted)
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
