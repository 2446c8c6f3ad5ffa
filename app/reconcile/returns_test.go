package reconcile_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/memstore"
)

// golden runs the reconciliation of a hand-written statement in testdata
// (written from the standard's element names, not by our writer) against
// books whose charges are DONE, each under the reference the statement's
// posting has (REF-<id>), their accounts 0012345600001, …02, … in order.
func golden(t *testing.T, file, collection string, names ...string) (*books, reconcile.Report) {
	t.Helper()
	b := newBooks(t, memstore.New(), "CHG-R-")
	for _, n := range names {
		b.done(t, b.charge(n, 2500))
	}
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Now: b.clock.Now()},
		reconcile.ReadFiles([]string{filepath.Join("testdata", file)}, statement.Options{CollectionAccount: collection}))
	if err != nil {
		t.Fatalf("Run %s: %v", file, err)
	}
	return b, rep
}

// wantCounts wants rep to count so many postings, reversals among them,
// and matched charges.
func wantCounts(t *testing.T, rep reconcile.Report, postings, reversals, matched int) {
	t.Helper()
	if rep.Postings != postings || rep.Reversals != reversals || rep.Matched != matched {
		t.Fatalf("%d postings (%d reversals), %d matched; want %d (%d), %d", rep.Postings, rep.Reversals, rep.Matched, postings, reversals, matched)
	}
}

func wantBreaks(t *testing.T, rep reconcile.Report, want ...string) {
	t.Helper()
	var got []string
	for _, br := range rep.Breaks {
		got = append(got, string(br.Kind)+" "+br.ChargeID)
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("breaks %q, want %q; notes %q", got, want, rep.Notes)
	}
}

// A reversal by the standard's rule (DBIT, RvslInd true, the same
// EndToEndId) with an AcctSvcrRef of its own cancels the posting of its
// end-to-end id and amount: CHG-R-8 is recorded_not_posted, not matched.
func TestReconcileReversalWithItsOwnReference(t *testing.T) {
	_, rep := golden(t, "camt053_001_08_reversal_own_ref.xml", "FEES-001", "7", "8")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-8")
	wantCounts(t, rep, 2, 1, 1)
	br := rep.Breaks[0]
	if !strings.Contains(br.Detail, "reversed") || len(br.Posted) != 2 || !br.Posted[1].Reversal || br.Posted[1].Reference != "RVSL-000091" {
		t.Fatalf("break %q, posted %+v", br.Detail, br.Posted)
	}
	for _, n := range rep.Notes {
		if strings.Contains(n, "earlier statement") {
			t.Fatalf("the reversal was taken for one of an earlier statement: %q", n)
		}
	}
}

// A return (a DBIT entry without RvslInd, its own AcctSvcrRef, RtrInf
// reason AC04) is the return of CHG-R-9's posting, reported with its code
// in the text, CSV and JSON reports.
func TestReconcileReturnWithReasonCode(t *testing.T) {
	_, rep := golden(t, "camt054_001_08_return_ac04.xml", "FEES-001", "9")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-9")
	br := rep.Breaks[0]
	if len(br.Posted) != 2 || !br.Posted[1].Return || br.Posted[1].ReturnReason != "AC04" || br.Posted[1].Reference != "RTN-000417" {
		t.Fatalf("posted %+v", br.Posted)
	}
	if !strings.Contains(br.Detail, "returned, reason AC04 (closed account number)") {
		t.Fatalf("detail %q", br.Detail)
	}
	text, csv, js := written(t, rep)
	for name, out := range map[string]string{"text": text, "csv": csv} {
		if !strings.Contains(out, "return AC04 (closed account number) CHG-R-9 INR 25.00 2026-12-01 RTN-000417") {
			t.Errorf("%s report does not name the return and its code:\n%s", name, out)
		}
	}
	if !strings.Contains(js, `"return":true,"returnReason":"AC04"`) {
		t.Errorf("JSON report: %s", js)
	}
}

// A booked debit and its reversal on a customer's own account
// (camt.053.001.02, the reversal's AcctSvcrRef its own, on the entry).
func TestReconcileBookedAndReversedPair(t *testing.T) {
	_, rep := golden(t, "camt053_001_02_booked_reversed.xml", "", "10")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-10")
	wantCounts(t, rep, 1, 1, 0)
}

// A batch entry credits three charges (several TxDtls in one Ntry); a
// batch of returns gives two of them back, each with its own code.
func TestReconcileBatchEntryAndBatchReturns(t *testing.T) {
	_, rep := golden(t, "camt054_001_02_batch.xml", "IN12 FEES 0000 0000 0001", "20", "21", "22")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-21", "recorded_not_posted CHG-R-22")
	wantCounts(t, rep, 3, 2, 1)
	for i, code := range []string{"AM04 (insufficient funds)", "MD06 (refund request by end customer)"} {
		if !strings.Contains(rep.Breaks[i].Detail, "reason "+code) {
			t.Errorf("%s: %q", rep.Breaks[i].ChargeID, rep.Breaks[i].Detail)
		}
	}
}

// A reversal with a reference of its own pairs only a posting booked on
// or before it, of its amount: one of another amount is a partial
// reversal's mismatch, never cancelled.
func TestReconcileOwnReferenceReversalNeedsItsAmount(t *testing.T) {
	b, c := oneCharge(t, "CHG-R-", "30", (*books).done)
	p := b.post(c, 1, 2500, true)
	rv := p
	rv.Reversal, rv.Reference, rv.Amount.Minor = true, "RVSL-OWN", 1000
	b.postings = append(b.postings, rv)
	rep := b.run(t)
	if br := findBreak(rep, c.ID); br != nil && br.Kind == reconcile.RecordedNotPosted {
		t.Fatalf("a reversal of 10.00 cancelled a posting of 25.00: %+v", br)
	}
}

// A collection account's statement read as customers' statements (no
// --collection-account) is refused, naming the flag and the account;
// with it, it is read.
func TestReconcileCollectionStatementReadAsCustomers(t *testing.T) {
	for _, tc := range []struct{ file, account string }{
		{"camt053_001_08_reversal_own_ref.xml", "FEES-001"},
		{"camt054_001_08_return_ac04.xml", "FEES-001"},
		{"camt054_001_02_batch.xml", "IN12FEES000000000001"},
	} {
		_, err := statement.ReadFile(filepath.Join("testdata", tc.file), statement.Options{}, func(statement.Posting) error { return nil })
		var cs *statement.CollectionSideError
		if !errors.As(err, &cs) || cs.Account != tc.account || !strings.Contains(err.Error(), "--collection-account "+tc.account) {
			t.Fatalf("%s read without the collection account: %v", tc.file, err)
		}
	}
	// A customer's statement (its debits) is read as it was.
	if _, err := statement.ReadFile(filepath.Join("testdata", "camt053_001_02_booked_reversed.xml"), statement.Options{}, func(statement.Posting) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// A day of the period with no entry of ours at all, when records were
// DONE that day, is a warning (the statement lacks the day), not a
// recorded_not_posted break for each; a day with entries still reports
// the charges it lacks.
func TestReconcileEmptyDayIsAWarning(t *testing.T) {
	b := newBooks(t, memstore.New(), "CHG-E-")
	for _, n := range []string{"1", "2", "3"} {
		b.done(t, b.charge(n, 2500)) // day 1, 09:00
	}
	b.clock.Advance(24 * time.Hour)
	posted := b.charge("4", 2500)
	b.done(t, posted) // day 2
	lost := b.charge("5", 2500)
	b.done(t, lost) // day 2, never posted
	p := b.post(posted, 1, 2500, true)
	p.BookingDate = day.AddDate(0, 0, 1)
	b.postings = []statement.Posting{p}
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp,
		Period: statement.Period{From: day, To: day.AddDate(0, 0, 2)}, Now: b.clock.Now()}, b.postings_())
	if err != nil {
		t.Fatal(err)
	}
	wantBreaks(t, rep, "recorded_not_posted CHG-E-5")
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "warning: the statement has no entry of ours on 2026-12-01, and 3 record(s) were DONE that day") {
		t.Fatalf("notes %q", rep.Notes)
	}
}

// Across two days read together: a posting of day 1 and its reversal of
// day 2 under a reference of its own are paired; a reversal booked before
// the posting is not.
func TestReconcileOwnReferenceReversalAcrossDays(t *testing.T) {
	two := statement.Period{From: day, To: day.AddDate(0, 0, 2)}
	for _, tc := range []struct {
		name         string
		posted, rvsl time.Time
		wantReversed bool
	}{
		{"reversed the next day", day, day.AddDate(0, 0, 1), true},
		{"a reversal booked before the posting", day.AddDate(0, 0, 1), day, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, c := oneCharge(t, "CHG-X-", "1", (*books).done)
			p := b.post(c, 1, 2500, true)
			p.BookingDate = tc.posted
			rv := p
			rv.Reversal, rv.Reference, rv.BookingDate = true, "RVSL-OWN-1", tc.rvsl
			b.postings = []statement.Posting{p, rv}
			rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: two, Now: b.clock.Now()}, b.postings_())
			if err != nil {
				t.Fatal(err)
			}
			br := findBreak(rep, c.ID)
			if got := br != nil && br.Kind == reconcile.RecordedNotPosted && strings.Contains(br.Detail, "reversed the posting recorded"); got != tc.wantReversed {
				t.Fatalf("reversed: %v, want %v (%+v, notes %q)", got, tc.wantReversed, br, rep.Notes)
			}
		})
	}
}

// A return booked with no RtrInf — a DBIT entry on the collection account
// under the original EndToEndId, no RvslInd, the bank transaction code
// PMNT/IDDT/UPDD, the reason only in the narrative — is CHG-R-12's
// return, its code read from the narrative; CHG-R-11 stands.
func TestReconcileReturnByBankTransactionCode(t *testing.T) {
	_, rep := golden(t, "camt053_001_08_return_bktxcd_narrative.xml", "FEES-001", "11", "12")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-12")
	wantCounts(t, rep, 2, 1, 1)
	br := rep.Breaks[0]
	if len(br.Posted) != 2 || !br.Posted[1].Return || br.Posted[1].ReturnReason != "AC04" || br.Posted[1].Minor != 2500 || br.Posted[1].Reference != "RTN-000777" {
		t.Fatalf("posted %+v", br.Posted)
	}
	if !strings.Contains(br.Detail, "returned, reason AC04 (closed account number)") {
		t.Fatalf("detail %q", br.Detail)
	}
}

// A bank's storno without our key (EndToEndId NOTPROVIDED) naming by its
// Refs/AcctSvcrRef the posting it reverses pairs with it: CHG-R-13 is
// recorded_not_posted, the storno shown under its key. A storno whose
// reference no posting read has is a warning with its amount and
// reference.
func TestReconcileStornoWithoutKey(t *testing.T) {
	_, rep := golden(t, "camt053_001_08_storno_notprovided.xml", "FEES-001", "13")
	wantBreaks(t, rep, "recorded_not_posted CHG-R-13")
	wantCounts(t, rep, 1, 1, 0)
	br := rep.Breaks[0]
	if len(br.Posted) != 2 || !br.Posted[1].Reversal || br.Posted[1].BankKey != "CHG-R-13" || br.Posted[1].Minor != 2500 || !strings.Contains(br.Detail, "reversed") {
		t.Fatalf("break %q, posted %+v", br.Detail, br.Posted)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "warning: a reversal of INR 30.00 booked 2026-12-01 without a bank key") || !strings.Contains(rep.Notes[0], "bank reference REF-CHG-R-99") {
		t.Fatalf("notes %q: want one warning naming the unpaired storno's amount and reference", rep.Notes)
	}
}
