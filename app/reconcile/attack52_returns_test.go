package reconcile_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// returnOf is the return (or reversal) shown on br, and whether there is
// one.
func returnOf(br *reconcile.Break) (reconcile.Posted, bool) {
	for _, p := range br.Posted {
		if p.Reversal {
			return p, true
		}
	}
	return reconcile.Posted{}, false
}

// A return as many banks book it (issue 52, found by the reviewer): a
// booked entry in the direction opposite to ours under the charge's
// EndToEndId, RvslInd absent, no RtrInf, its bank transaction code a
// direct debit's return (PMNT/IDDT/UPDD on the collection account,
// PMNT/RDDT/UPDD on the customer's), the reason only in the narrative.
// Money went back under our key: the charge is recorded_not_posted with
// the return shown (amount, reason read from the narrative), never
// matched. The same entry under a code that is no return stays skipped.
func TestAttack52ReturnWithoutRtrInf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		collection bool
		bktx       string
		addtl      string // AddtlNtryInf and AddtlTxInf
		want       string // the break ("" none: matched)
		reason     string
	}{
		{"UPDD, reason in the narrative", true, "PMNT/IDDT/UPDD", "RETURN AC04 ACCOUNT CLOSED", "recorded_not_posted 1", "AC04"},
		{"UPDD, no narrative", true, "PMNT/IDDT/UPDD", "", "recorded_not_posted 1", ""},
		{"PRDD (reversal due to a payment return), AM04", true, "PMNT/IDDT/PRDD", "UNPAID AM04", "recorded_not_posted 1", "AM04"},
		{"RCDD (cancellation request)", true, "PMNT/IDDT/RCDD", "REFUND MD06 REQUESTED", "recorded_not_posted 1", "MD06"},
		{"customer's account, RDDT/UPDD", false, "PMNT/RDDT/UPDD", "RETURN AC04", "recorded_not_posted 1", "AC04"},
		{"a debit of another kind (ESDD) is not ours", true, "PMNT/IDDT/ESDD", "RETURN AC04", "", ""},
		{"a word that merely looks like a code is not read", true, "PMNT/IDDT/UPDD", "RETURNAC04 AC04X", "recorded_not_posted 1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52R-", 1)
			c := cs[0]
			st := x52stmt{acct: x52fees, entries: []x52ntry{
				x52credit(c, "25.00", "REF-"+c.ID),
				{amt: "25.00", ind: "DBIT", ref: "RTN-000777", bktx: tc.bktx, addtl: tc.addtl,
					txs: []x52tx{{e2e: c.ID, ref: "RTN-000777", amt: "25.00", dbtr: c.AccountID, addtlTxInf: tc.addtl}}},
			}}
			coll := x52fees
			if !tc.collection {
				coll = ""
				st = x52stmt{acct: c.AccountID, entries: []x52ntry{
					{amt: "25.00", ind: "DBIT", ref: "REF-" + c.ID, bktx: "PMNT/RDDT/ESDD", txs: []x52tx{{e2e: c.ID, ustrd: c.DebitRequestFor(1).Narrative}}},
					{amt: "25.00", ind: "CRDT", ref: "RTN-000777", bktx: tc.bktx, addtl: tc.addtl, txs: []x52tx{{e2e: c.ID, ref: "RTN-000777", addtlTxInf: tc.addtl}}},
				}}
			}
			rep := x52run(t, b, coll, x52doc("053", "08", st))
			if got := x52breaks(b, rep); got != tc.want {
				t.Fatalf("breaks %q, want %q (matched %d, reversals %d, notes %q)", got, tc.want, rep.Matched, rep.Reversals, rep.Notes)
			}
			if tc.want == "" {
				if rep.Matched != 1 || rep.Reversals != 0 {
					t.Fatalf("matched %d, reversals %d: want the charge matched, the debit of another kind skipped", rep.Matched, rep.Reversals)
				}
				return
			}
			br := findBreak(rep, c.ID)
			rt, ok := returnOf(br)
			if !ok || !rt.Return || rt.ReturnReason != tc.reason || rt.Minor != 2500 || rt.Currency != "INR" || rt.Reference != "RTN-000777" {
				t.Fatalf("the return shown: %+v (found %t); want a return of INR 25.00, reason %q, reference RTN-000777", rt, ok, tc.reason)
			}
			if !strings.Contains(br.Detail, "returned, reason "+statementReason(tc.reason)) || rep.Reversals != 1 || rep.Matched != 0 {
				t.Fatalf("detail %q, reversals %d, matched %d", br.Detail, rep.Reversals, rep.Matched)
			}
		})
	}
}

func statementReason(code string) string {
	switch code {
	case "":
		return "no reason code"
	case "AC04":
		return "AC04 (closed account number)"
	case "AM04":
		return "AM04 (insufficient funds)"
	case "MD06":
		return "MD06 (refund request by end customer)"
	}
	return code
}

// A bank's own reversal (storno) of a credit on the collection account,
// without the originator's end-to-end id (EndToEndId NOTPROVIDED, or no
// TxDtls at all), naming the posting it reverses by its AcctSvcrRef
// (issue 52, found by the reviewer: it was counted in Header.Unkeyed and
// dropped). It pairs with the posting of that reference when one is read
// (the charge recorded_not_posted, the storno shown under its key; of
// another amount, a partial reversal: amount_mismatch); else it is a
// warning naming its amount and reference, never nothing.
func TestAttack52UnkeyedReversal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		storno  func(c charge.Charge) x52ntry
		want    string
		note    string // a note that must be there ("" none about a reversal without a key)
		ref     string // what the note says of its reference
		matched int
	}{
		{"NOTPROVIDED, the posting's AcctSvcrRef", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "REF-" + c.ID, addtl: "STORNO REF-" + c.ID,
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-" + c.ID, amt: "25.00", dbtr: c.AccountID}}}
		}, "recorded_not_posted 1", "", "", 0},
		{"NOTPROVIDED, no DbtrAcct, its own entry reference and the posting's in Refs", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "STORNO-000031",
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-" + c.ID, amt: "25.00"}}}
		}, "recorded_not_posted 1", "", "", 0},
		{"no TxDtls, the entry's AcctSvcrRef", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "REF-" + c.ID}
		}, "recorded_not_posted 1", "", "", 0},
		{"of another amount: a partial reversal", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "10.00", ind: "DBIT", rvsl: true, ref: "REF-" + c.ID,
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-" + c.ID, amt: "10.00", dbtr: c.AccountID}}}
		}, "amount_mismatch 1", "", "", 0},
		{"a reference no posting read has", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "30.00", ind: "DBIT", rvsl: true, ref: "REF-ELSEWHERE-9",
				txs: []x52tx{{e2e: "NOTPROVIDED", ref: "REF-ELSEWHERE-9", amt: "30.00", dbtr: c.AccountID}}}
		}, "", "warning: a reversal of INR 30.00 booked ", "bank reference REF-ELSEWHERE-9", 1},
		{"no reference at all", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "30.00", ind: "DBIT", rvsl: true,
				txs: []x52tx{{e2e: "NOTPROVIDED", amt: "30.00", dbtr: c.AccountID}}}
		}, "", "warning: a reversal of INR 30.00 booked ", "no bank reference", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52U-", 1)
			c := cs[0]
			rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
				x52credit(c, "25.00", "REF-"+c.ID), tc.storno(c),
			}}))
			if got := x52breaks(b, rep); got != tc.want || rep.Matched != tc.matched {
				t.Fatalf("breaks %q, matched %d; want %q, %d (reversals %d, notes %q)", got, rep.Matched, tc.want, tc.matched, rep.Reversals, rep.Notes)
			}
			keyless := slices.IndexFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "without a bank key") })
			switch {
			case tc.note != "" && (keyless < 0 || !strings.Contains(rep.Notes[keyless], tc.note) || !strings.Contains(rep.Notes[keyless], tc.ref)):
				t.Fatalf("notes %q: want one naming the reversal's amount and reference (%q)", rep.Notes, tc.note)
			case tc.note == "" && keyless >= 0 && tc.want != "":
				t.Fatalf("paired, yet a note says it was not: %q", rep.Notes[keyless])
			}
			if tc.want == "" {
				return
			}
			br := findBreak(rep, c.ID)
			rv, ok := returnOf(br)
			if !ok || rv.BankKey != c.ID || rv.Return || rv.Currency != "INR" {
				t.Fatalf("the storno shown: %+v (found %t); want a reversal under %s", rv, ok, c.ID)
			}
			if rep.Reversals != 1 {
				t.Fatalf("reversals %d, want 1", rep.Reversals)
			}
		})
	}
}

// The same storno read from two files (the camt.053 and a camt.054 that
// repeats it) is one reversal: paired once, or noted once.
func TestAttack52UnkeyedReversalReadTwice(t *testing.T) {
	for _, tc := range []struct {
		name, ref string
		want      string
		notes     int
	}{
		{"paired", "", "recorded_not_posted 1", 0},
		{"unpaired", "REF-ELSEWHERE-9", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52T-", 1)
			c := cs[0]
			ref := tc.ref
			if ref == "" {
				ref = "REF-" + c.ID
			}
			storno := x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, ref: "STORNO-1", txs: []x52tx{{e2e: "NOTPROVIDED", ref: ref, amt: "25.00"}}}
			rep := x52run(t, b, x52fees,
				x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{x52credit(c, "25.00", "REF-"+c.ID), storno}}),
				x52doc("054", "08", x52stmt{acct: x52fees, entries: []x52ntry{storno}}))
			keyless := 0
			for _, n := range rep.Notes {
				if strings.Contains(n, "without a bank key") {
					keyless++
				}
			}
			if got := x52breaks(b, rep); got != tc.want || keyless != tc.notes {
				t.Fatalf("breaks %q, %d note(s) of a reversal without a key; want %q, %d (notes %q)", got, keyless, tc.want, tc.notes, rep.Notes)
			}
			if tc.want != "" && (rep.Reversals != 1 || len(findBreak(rep, c.ID).Posted) != 2) {
				t.Fatalf("reversals %d, posted %+v: want the storno once", rep.Reversals, findBreak(rep, c.ID).Posted)
			}
		})
	}
}

// A storno naming a batch's reference (the entry's AcctSvcrRef, which its
// transactions without references of their own all carry) names several
// postings of its amount: it pairs with none, and is noted. Resolve, which
// judges one charge alone, pairs it as the whole run does: no break.
func TestAttack52UnkeyedReversalOfABatchReference(t *testing.T) {
	b, c, d := x52two(t, "A52B-")
	n := c.DebitRequestFor(1).Narrative
	doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52batch("50.00", "BATCH-0031", x52in(c, n), x52in(d, d.DebitRequestFor(1).Narrative)),
		{amt: "25.00", ind: "DBIT", rvsl: true, ref: "STORNO-31", txs: []x52tx{{e2e: "NOTPROVIDED", ref: "BATCH-0031", amt: "25.00"}}},
	}})
	f := filepath.Join(t.TempDir(), "stmt.xml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	read := reconcile.ReadFiles([]string{f}, statement.Options{CollectionAccount: x52fees})
	opts := reconcile.Options{Store: b.store, Fingerprints: b.fp, Now: b.clock.Now()}
	rep, err := reconcile.Run(t.Context(), opts, read)
	if err != nil {
		t.Fatal(err)
	}
	if got := x52breaks(b, rep); got != "" || rep.Matched != 2 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "a reversal of INR 25.00") || !strings.Contains(rep.Notes[0], "BATCH-0031") {
		t.Fatalf("breaks %q, matched %d, notes %q: want both matched and the storno noted", got, rep.Matched, rep.Notes)
	}
	_, err = reconcile.Resolve(t.Context(), opts, read, reconcile.ResolveRequest{ChargeID: c.ID, Reason: "r", Operator: "op", Guard: b.guard})
	if !errors.Is(err, reconcile.ErrNoBreak) {
		t.Fatalf("resolve of %s: %v; want ErrNoBreak (the storno pairs with no one posting in the whole run either)", c.ID, err)
	}
}
