package reconcile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
	"github.com/finedge/idempotent-consumer/memstore"
)

// payer is the account number a payer's bank sent as the end-to-end id of
// a credit.
const payer = "123456789012"

func TestShowKey(t *testing.T) {
	for _, tt := range []struct {
		key      string
		accounts []string
		want     string
	}{
		{"CHG-1", nil, "CHG-1"},
		{"CHG-1~2", nil, "CHG-1~2"},
		{"CHG-2026-11-000123~3", nil, "CHG-2026-11-000123~3"}, // a letter: an id, its digits are not an account
		{payer, nil, "********9012"},                          // looks like an account number
		{payer + "~2", nil, "**********12~2"},
		{"0012-3456-7890", nil, "**********7890"},
		{"CHG-1", []string{"CHG-1"}, "*"},               // equal to the row's account
		{"A" + payer, []string{payer}, "*********9012"}, // holds it
		{"_renotify/CHG-1", nil, "***********HG-1"},     // not a key the collector sends
		{"CHG-1~x", nil, "***-1~x"},                     // nor this
		{"2026-11-30", nil, "2026-11-30"},               // a date is no account number
		{"", nil, ""},
	} {
		want := tt.want
		if want == "*" {
			want = charge.MaskAccount(tt.key)
		}
		if got := reconcile.ShowKey(tt.key, tt.accounts...); got != want {
			t.Errorf("ShowKey(%q, %q) = %q, want %q", tt.key, tt.accounts, got, want)
		}
		if got := reconcile.ShowKey(reconcile.ShowKey(tt.key, tt.accounts...), tt.accounts...); got != want {
			t.Errorf("ShowKey twice on %q = %q, want %q (masking is idempotent)", tt.key, got, want)
		}
	}
}

// maskedBooks is a statement with a credit whose end-to-end id (its bank
// key) is the payer's account number, one whose key holds it, and one of
// ours (a FAILED charge the bank posted, shown under its own key).
func maskedBooks(t *testing.T) (*books, charge.Charge) {
	b, c := oneCharge(t, "MSK-", "own", (*books).failed)
	b.post(c, 1, 2500, true)
	b.postings = append(b.postings,
		statement.Posting{BankKey: payer, Account: payer, Amount: charge.Money{Minor: 100000, Currency: "INR"}, BookingDate: day,
			Reference: "NEFT/" + payer + "/INWARD", Where: "camt.053 entry 7 (" + payer + ")"},
		statement.Posting{BankKey: "E2E-" + payer, Account: payer, Amount: charge.Money{Minor: 5000, Currency: "INR"}, BookingDate: day,
			Reference: "UPI-77", Where: "camt.053 entry 8"})
	return b, c
}

// wantNoPayer fails if text holds 8 digits of the payer's account in a row.
func wantNoPayer(t *testing.T, what, text string) {
	t.Helper()
	if f := wiretest.Leaks(text, payer); f != "" {
		t.Errorf("%s holds the payer's account (%s):\n%s", what, f, text)
	}
}

// The report of a statement with a credit whose end-to-end id is the
// payer's account number shows it masked everywhere — text, CSV, JSON, the
// kept file — and our own charge's key as it is.
func TestReportMasksAForeignKeyThatIsAnAccountNumber(t *testing.T) {
	b, c := maskedBooks(t)
	rep := b.run(t)
	var unknown []reconcile.Break
	for _, br := range rep.Breaks {
		if br.Kind == reconcile.UnknownPosting {
			unknown = append(unknown, br)
		}
	}
	if len(unknown) != 2 {
		t.Fatalf("breaks %+v: want two unknown postings", rep.Breaks)
	}
	text, csv, js := written(t, rep)
	kept, file := keptFile(t, rep)
	for what, out := range map[string]string{"text": text, "CSV": csv, "JSON": js, "kept file": file} {
		wantNoPayer(t, "the "+what+" report", out)
		if !strings.Contains(out, c.ID) || !strings.Contains(out, "********9012") {
			t.Errorf("the %s report does not show our key %s and the masked one:\n%s", what, c.ID, out)
		}
	}
	// Read back, it is the same report: masking is idempotent.
	back, err := reconcile.ReadReportFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := json.Marshal(back.Breaks); string(a) != mustJSON(t, rep.Breaks) {
		t.Errorf("read back:\n%s\nwant\n%s", a, mustJSON(t, rep.Breaks))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A report kept before keys were masked is masked as it is read; its
// breaks keep their ids.
func TestAReportKeptUnmaskedIsMaskedWhenRead(t *testing.T) {
	old := reconcile.Report{Breaks: []reconcile.Break{{Kind: reconcile.UnknownPosting, ChargeID: payer, BankKeys: []string{payer},
		Posted: []reconcile.Posted{{BankKey: payer, Account: "********9012", Reference: "R1", Where: "entry " + payer}},
		Detail: "posted under " + payer, Action: "ask about " + payer, ID: "fedcba9876543210"}}}
	raw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(t.TempDir(), "old.json")
	if err := os.WriteFile(kept, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := reconcile.ReadReportFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	wantNoPayer(t, "the report read", mustJSON(t, rep))
	if rep.Breaks[0].ID != "fedcba9876543210" || rep.Breaks[0].ChargeID != "********9012" {
		t.Errorf("read %+v", rep.Breaks[0])
	}
}

// A break shown under a masked id is still closed by it: Resolve finds the
// charges shown so and takes the break the id names; the next run finds
// it resolved; the resolution holds no account either.
func TestResolveABreakShownMasked(t *testing.T) {
	b, _ := maskedBooks(t)
	rep := b.run(t)
	var br *reconcile.Break
	for i := range rep.Breaks {
		if rep.Breaks[i].ChargeID == "********9012" {
			br = &rep.Breaks[i]
		}
	}
	if br == nil {
		t.Fatalf("no break under ********9012: %+v", rep.Breaks)
	}
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: br.ChargeID, BreakID: br.ID, Reason: "a credit, not a debit of ours", Operator: "ops", Guard: b.guard})
	if err != nil || res.Action != "marked" || res.Break.ID != br.ID {
		t.Fatalf("Resolve: %+v %v", res, err)
	}
	wantNoPayer(t, "the resolution", mustJSON(t, res))
	again := b.run(t)
	if again.Resolved != 1 || len(again.Breaks) != len(rep.Breaks)-1 {
		t.Fatalf("after resolving: %d resolved, %d breaks (was %d)", again.Resolved, len(again.Breaks), len(rep.Breaks))
	}
	// The resolution's record is under the masked id.
	rec, err := b.store.Get(t.Context(), reconcile.ResolutionPrefix+br.ChargeID+"/"+string(br.Kind)+"/"+br.ID, b.clock.Now())
	if err != nil {
		t.Fatalf("the resolution's record: %v", err)
	}
	wantNoPayer(t, "the resolution's record", rec.Key+" "+rec.Detail)
}

// Issue 54 item 2: a bank's reference is an identifier, shown the same way
// in a break's postings (the table) and in its detail: whole when it is
// one, though it holds a grouped date and sequence.
func TestABankReferenceIsShownTheSameWayInTheTableAndTheDetail(t *testing.T) {
	b := newBooks(t, memstore.New(), "CHG-")
	c := b.charge("2026-11-000123", 2500)
	b.done(t, c)
	b.reverse(b.post(c, 1, 2500, true)) // posted, then reversed
	rep := b.run(t)
	br := findBreak(rep, c.ID)
	if br == nil || br.Kind != reconcile.RecordedNotPosted {
		t.Fatalf("break = %+v, want recorded_not_posted", br)
	}
	recorded := "REF-" + charge.BankKey(c.ID, 1)
	if !strings.Contains(br.Detail, "(reference "+recorded+")") {
		t.Errorf("detail %q does not name the reference %s whole", br.Detail, recorded)
	}
	for _, s := range append([]string{br.Detail}, postedRefs(br)...) {
		if strings.Contains(s, "*") {
			t.Errorf("a reference shown masked: %q", s)
		}
	}
	if refs := postedRefs(br); len(refs) == 0 || refs[0] != recorded {
		t.Errorf("the table's references %q, want the first %q whole", refs, recorded)
	}
}

func postedRefs(b *reconcile.Break) []string {
	var out []string
	for _, p := range b.Posted {
		out = append(out, p.Reference)
	}
	return out
}

// The reconciliation report shows a charge id by the rule every view
// uses (charge.ShowID): an id holding the row's account grouped, or
// another account's digits, is masked as dlq list masks it.
func TestAttack54MaskShowKeyIsShowID(t *testing.T) {
	for _, tt := range []struct {
		key      string
		accounts []string
	}{
		{"CHG-0012-3456-7890", []string{"001234567890"}}, // the row's account, grouped
		{"CHG-0012-3456-7890~2", nil},                    // an account's grouping
		{"CHG-001234567890", nil},                        // an account's digits
		{"CHG-123-4567", []string{"1234567"}},            // a short account, grouped
	} {
		got := reconcile.ShowKey(tt.key, tt.accounts...)
		if got == tt.key {
			t.Errorf("ShowKey(%q, %q) = %q: shown whole (dlq list shows %q)", tt.key, tt.accounts, got, charge.ShowID(tt.key, tt.accounts...))
		}
	}
	for _, key := range []string{"CHG-2026-11-000123", "CHG-2026-11-000123~3", "CHG-2026-11-30-0001"} {
		if got := reconcile.ShowKey(key); got != key {
			t.Errorf("ShowKey(%q) = %q, want it whole", key, got)
		}
	}
}

// A posting's reference and where it was read, holding the payer's
// account grouped, are masked in every form of the report.
func TestAttack54MaskGroupedAccountInAPosting(t *testing.T) {
	const grouped = "1234-5678-9012" // payer, grouped
	b, _ := oneCharge(t, "MSG-", "own", (*books).failed)
	b.postings = append(b.postings,
		statement.Posting{BankKey: "E2E-X1", Account: payer, Amount: charge.Money{Minor: 5000, Currency: "INR"}, BookingDate: day,
			Reference: "NEFT-" + grouped + "-IN", Where: "camt.053 entry 8 (" + grouped + ")"})
	rep := b.run(t)
	text, csv, js := written(t, rep)
	_, file := keptFile(t, rep)
	for what, out := range map[string]string{"text": text, "CSV": csv, "JSON": js, "kept file": file} {
		if what != "JSON" && !strings.Contains(out, "NEFT-") && !strings.Contains(out, "E2E-X1") {
			t.Errorf("the %s report does not show the posting:\n%s", what, out)
		}
		if strings.Contains(out, grouped) {
			t.Errorf("the %s report shows the payer's account grouped:\n%s", what, out)
		}
	}
}

// A break of our own charge whose id is shown masked (it holds an
// account's digits) is still closed by the id and break the report gave,
// and the report shows none of the id's digits but its last four.
func TestAttack54MaskResolveOurChargeShownMasked(t *testing.T) {
	b, c := oneCharge(t, "CHG-", "001234567890", (*books).failed)
	b.post(c, 1, 2500, true)
	rep := b.run(t)
	var br *reconcile.Break
	for i := range rep.Breaks {
		if strings.HasSuffix(rep.Breaks[i].ChargeID, "7890") {
			br = &rep.Breaks[i]
		}
	}
	if br == nil || br.ChargeID == c.ID {
		t.Fatalf("breaks %+v: want %s's shown masked", rep.Breaks, c.ID)
	}
	text, csv, js := written(t, rep)
	for what, out := range map[string]string{"text": text, "CSV": csv, "JSON": js} {
		if strings.Contains(out, "12345678") {
			t.Errorf("the %s report shows the id's digits:\n%s", what, out)
		}
	}
	res, err := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: br.ChargeID, BreakID: br.ID, Reason: "INC-9", Operator: "ops", Guard: b.guard, Unverified: true})
	if err != nil || res.Break.ID != br.ID {
		t.Fatalf("Resolve by the id shown: %+v %v", res, err)
	}
	if strings.Contains(mustJSON(t, res), "12345678") {
		t.Errorf("the resolution shows the id's digits: %s", mustJSON(t, res))
	}
}
