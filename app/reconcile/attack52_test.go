package reconcile_test

// Attack 52: statements written by hand from the ISO 20022 element names
// (camt.053 / camt.054), in the shapes banks send, NOT with
// statement.WriteCamt053, fed to the reconciliation against records made
// through the Guard (memstore). Each test asserts what a payments engineer
// expects of the matching.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/memstore"
)

// x52tx is one TxDtls.
type x52tx struct {
	e2e, ref   string // Refs/EndToEndId, Refs/AcctSvcrRef ("" = absent)
	amt        string // TxDtls/Amt ("" = absent)
	txAmt      string // AmtDtls/TxAmt/Amt ("" = absent)
	instd      string // AmtDtls/InstdAmt/Amt ("" = absent)
	instdCcy   string
	dbtr       string // RltdPties/DbtrAcct/Id/Othr/Id
	ustrd      string // RmtInf/Ustrd ("" = no RmtInf)
	rtr        string // RtrInf/Rsn/Cd ("" = no RtrInf)
	addtlTxInf string
}

// x52ntry is one Ntry.
type x52ntry struct {
	amt, ind, sts string // Ntry/Amt, CdtDbtInd, Sts/Cd
	rvsl          bool
	bookg, val    string
	ref           string // Ntry/AcctSvcrRef
	bktx          string // "PMNT/IDDT/UPDD"
	btch          bool   // NtryDtls/Btch with NbOfTxs and TtlAmt
	addtl         string // AddtlNtryInf
	txs           []x52tx
}

type x52stmt struct {
	acct     string
	from, to string // FrDtTm / ToDtTm
	entries  []x52ntry
}

func x52esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	return r.Replace(s)
}

// x52doc writes a camt.05N.001.VV Document (msg "053" or "054").
func x52doc(msg, ver string, stmts ...x52stmt) string {
	var b strings.Builder
	body, st := "BkToCstmrStmt", "Stmt"
	if msg == "054" {
		body, st = "BkToCstmrDbtCdtNtfctn", "Ntfctn"
	}
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Document xmlns=\"urn:iso:std:iso:20022:tech:xsd:camt.%s.001.%s\">\n<%s>\n", msg, ver, body)
	fmt.Fprintf(&b, "<GrpHdr><MsgId>A52-%s</MsgId><CreDtTm>2026-12-02T01:00:00Z</CreDtTm></GrpHdr>\n", msg)
	for i, s := range stmts {
		fmt.Fprintf(&b, "<%s><Id>A52-%s-%d</Id><CreDtTm>2026-12-02T01:00:00Z</CreDtTm>\n", st, msg, i+1)
		from, to := s.from, s.to
		if from == "" {
			from, to = "2026-12-01T00:00:00Z", "2026-12-01T23:59:59Z"
		}
		fmt.Fprintf(&b, "<FrToDt><FrDtTm>%s</FrDtTm><ToDtTm>%s</ToDtTm></FrToDt>\n", from, to)
		fmt.Fprintf(&b, "<Acct><Id><Othr><Id>%s</Id></Othr></Id><Ccy>INR</Ccy></Acct>\n", s.acct)
		for n, e := range s.entries {
			fmt.Fprintf(&b, "<Ntry><NtryRef>%d</NtryRef><Amt Ccy=\"INR\">%s</Amt><CdtDbtInd>%s</CdtDbtInd>", n+1, e.amt, e.ind)
			if e.rvsl {
				b.WriteString("<RvslInd>true</RvslInd>")
			}
			sts := e.sts
			if sts == "" {
				sts = "BOOK"
			}
			if ver >= "08" {
				fmt.Fprintf(&b, "<Sts><Cd>%s</Cd></Sts>", sts)
			} else {
				fmt.Fprintf(&b, "<Sts>%s</Sts>", sts)
			}
			bookg := e.bookg
			if bookg == "" {
				bookg = "2026-12-01"
			}
			fmt.Fprintf(&b, "<BookgDt><Dt>%s</Dt></BookgDt>", bookg)
			val := e.val
			if val == "" {
				val = bookg
			}
			fmt.Fprintf(&b, "<ValDt><Dt>%s</Dt></ValDt>", val)
			if e.ref != "" {
				fmt.Fprintf(&b, "<AcctSvcrRef>%s</AcctSvcrRef>", e.ref)
			}
			if e.bktx != "" {
				p := strings.Split(e.bktx, "/")
				fmt.Fprintf(&b, "<BkTxCd><Domn><Cd>%s</Cd><Fmly><Cd>%s</Cd><SubFmlyCd>%s</SubFmlyCd></Fmly></Domn></BkTxCd>", p[0], p[1], p[2])
			}
			b.WriteString("\n<NtryDtls>")
			if e.btch {
				fmt.Fprintf(&b, "<Btch><NbOfTxs>%d</NbOfTxs><TtlAmt Ccy=\"INR\">%s</TtlAmt><CdtDbtInd>%s</CdtDbtInd></Btch>", len(e.txs), e.amt, e.ind)
			}
			for _, t := range e.txs {
				b.WriteString("\n<TxDtls><Refs>")
				if t.ref != "" {
					fmt.Fprintf(&b, "<AcctSvcrRef>%s</AcctSvcrRef>", t.ref)
				}
				fmt.Fprintf(&b, "<EndToEndId>%s</EndToEndId></Refs>", t.e2e)
				if t.amt != "" {
					fmt.Fprintf(&b, "<Amt Ccy=\"INR\">%s</Amt>", t.amt)
				}
				if t.txAmt != "" || t.instd != "" {
					b.WriteString("<AmtDtls>")
					if t.instd != "" {
						fmt.Fprintf(&b, "<InstdAmt><Amt Ccy=\"%s\">%s</Amt></InstdAmt>", t.instdCcy, t.instd)
					}
					if t.txAmt != "" {
						fmt.Fprintf(&b, "<TxAmt><Amt Ccy=\"INR\">%s</Amt></TxAmt>", t.txAmt)
					}
					b.WriteString("</AmtDtls>")
				}
				if t.dbtr != "" {
					fmt.Fprintf(&b, "<RltdPties><DbtrAcct><Id><Othr><Id>%s</Id></Othr></Id></DbtrAcct></RltdPties>", t.dbtr)
				}
				if t.ustrd != "" {
					fmt.Fprintf(&b, "<RmtInf><Ustrd>%s</Ustrd></RmtInf>", x52esc(t.ustrd))
				}
				if t.rtr != "" {
					fmt.Fprintf(&b, "<RtrInf><Rsn><Cd>%s</Cd></Rsn></RtrInf>", t.rtr)
				}
				if t.addtlTxInf != "" {
					fmt.Fprintf(&b, "<AddtlTxInf>%s</AddtlTxInf>", x52esc(t.addtlTxInf))
				}
				b.WriteString("</TxDtls>")
			}
			b.WriteString("</NtryDtls>")
			if e.addtl != "" {
				fmt.Fprintf(&b, "<AddtlNtryInf>%s</AddtlNtryInf>", x52esc(e.addtl))
			}
			b.WriteString("</Ntry>\n")
		}
		fmt.Fprintf(&b, "</%s>\n", st)
	}
	fmt.Fprintf(&b, "</%s>\n</Document>\n", body)
	return b.String()
}

const x52fees = "FEES-001"

// x52run writes the documents to files and reconciles them (read from the
// collection account's side when coll is set) against b's records.
func x52run(t *testing.T, b *books, coll string, docs ...string) reconcile.Report {
	t.Helper()
	var files []string
	for i, d := range docs {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("stmt%d.xml", i))
		if err := os.WriteFile(f, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	rep, err := reconcile.Run(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Now: b.clock.Now()},
		reconcile.ReadFiles(files, statement.Options{CollectionAccount: coll}))
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, docs[0])
	}
	return rep
}

func x52breaks(b *books, rep reconcile.Report) string {
	return strings.Join(b.mine(rep), "; ")
}

func x52want(t *testing.T, b *books, rep reconcile.Report, what string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := x52breaks(b, rep); got != strings.Join(want, "; ") {
		t.Fatalf("%s:\n  breaks  %q\n  want    %q\n  postings %d (reversals %d), matched %d (unverified %d); notes %q",
			what, got, strings.Join(want, "; "), rep.Postings, rep.Reversals, rep.Matched, rep.Unverified, rep.Notes)
	}
}

// x52wantMatched is x52want with want matched charges on top.
func x52wantMatched(t *testing.T, b *books, rep reconcile.Report, what string, matched int, want ...string) {
	t.Helper()
	x52want(t, b, rep, what, want...)
	if rep.Matched != matched {
		t.Fatalf("%s: matched %d, want %d", what, rep.Matched, matched)
	}
}

// x52batch is the collection account's credit of txs as a batch: one entry
// (Btch) under ref, the transactions without references of their own.
func x52batch(amt, ref string, txs ...x52tx) x52ntry {
	return x52ntry{amt: amt, ind: "CRDT", ref: ref, bktx: "PMNT/IDDT/ESDD", btch: true, txs: txs}
}

// x52in is c's 25.00 in a batch, its remittance information ustrd.
func x52in(c charge.Charge, ustrd string) x52tx {
	return x52tx{e2e: c.ID, amt: "25.00", dbtr: c.AccountID, ustrd: ustrd}
}

// x52credit is the collection account's credit of c (one transaction).
func x52credit(c charge.Charge, amt, ref string) x52ntry {
	return x52ntry{amt: amt, ind: "CRDT", ref: ref, bktx: "PMNT/IDDT/ESDD",
		txs: []x52tx{{e2e: c.ID, amt: amt, dbtr: c.AccountID, ustrd: c.DebitRequestFor(1).Narrative}}}
}

// x52two is x52books of two charges, each DONE.
func x52two(t *testing.T, prefix string) (b *books, c, d charge.Charge) {
	b, cs := x52books(t, prefix, 2)
	return b, cs[0], cs[1]
}

func x52books(t *testing.T, prefix string, n int) (*books, []charge.Charge) {
	b := newBooks(t, memstore.New(), prefix)
	var cs []charge.Charge
	for i := range n {
		c := b.charge(fmt.Sprint(i+1), 2500)
		b.done(t, c)
		cs = append(cs, c)
	}
	return b, cs
}

// 1. A partial reversal under a reference of its own (banks give a
// reversal its own AcctSvcrRef): the collection account is credited 25.00,
// then debited 10.00 with RvslInd true under the same EndToEndId. The doc:
// "A reversal of another amount than the posting's is a partial reversal
// (amount_mismatch)". The same with a return of another amount (RtrInf,
// the return fee booked in the transaction amount: InstdAmt 25.00, TxAmt
// 30.00).
func TestAttack52PartialReversalWithItsOwnReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		rv   func(c charge.Charge) x52ntry
		want string
	}{
		{"reversal RvslInd 10.00 of 25.00", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "10.00", ind: "DBIT", rvsl: true, ref: "RVSL-000001", bktx: "PMNT/IDDT/PRDD",
				txs: []x52tx{{e2e: c.ID, ref: "RVSL-000001", amt: "10.00", dbtr: c.AccountID}}}
		}, "amount_mismatch 1"},
		{"return AM04 with its fee in TxAmt (InstdAmt 25.00, TxAmt 30.00)", func(c charge.Charge) x52ntry {
			return x52ntry{amt: "30.00", ind: "DBIT", ref: "RTN-000001", bktx: "PMNT/IDDT/UPDD",
				txs: []x52tx{{e2e: c.ID, ref: "RTN-000001", instd: "25.00", instdCcy: "INR", txAmt: "30.00", dbtr: c.AccountID, rtr: "AM04"}}}
		}, "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cs := x52books(t, "A52P-", 1)
			c := cs[0]
			doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
				x52credit(c, "25.00", "REF-"+c.ID),
				tc.rv(c),
			}})
			rep := x52run(t, b, x52fees, doc)
			if tc.want == "*" {
				if findBreak(rep, c.ID) == nil {
					t.Fatalf("the debit was returned (30.00 out of the collection account under its key, own reference): breaks %q, matched %d, reversals %d, notes %q; want a break (recorded_not_posted, returned), not a match",
						x52breaks(b, rep), rep.Matched, rep.Reversals, rep.Notes)
				}
				return
			}
			x52want(t, b, rep, "25.00 credited, 10.00 reversed under its own reference", tc.want)
		})
	}
}

// 3. A batch (Btch, NbOfTxs 2, one Ntry/AcctSvcrRef) credits the same
// EndToEndId twice: the customer was debited twice. The TxDtls carry no
// Refs/AcctSvcrRef of their own (optional in the standard, often absent),
// so both take the entry's; the de-duplication ("the same reference, day
// and amount: read twice") drops the second. Want posted_twice.
func TestAttack52BatchWithTheSameKeyTwiceIsDeduplicated(t *testing.T) {
	b, c, d := x52two(t, "A52B-")
	n := c.DebitRequestFor(1).Narrative
	doc := x52doc("054", "02", x52stmt{acct: x52fees, entries: []x52ntry{
		x52batch("75.00", "BATCH-0001",
			x52tx{e2e: c.ID, txAmt: "25.00", dbtr: c.AccountID, ustrd: n},
			x52tx{e2e: d.ID, txAmt: "25.00", dbtr: d.AccountID, ustrd: n},
			x52tx{e2e: c.ID, txAmt: "25.00", dbtr: c.AccountID, ustrd: n},
		),
	}})
	rep := x52run(t, b, x52fees, doc)
	x52want(t, b, rep, "one batch of 75.00: 1, 2 and 1 again (three transactions, NbOfTxs 3, summing to the entry)", "posted_twice 1")
}

// 3b. The same double posting in two entries of one statement, the bank's
// AcctSvcrRef being per instruction (the same on both entries). Two Ntry of
// one Stmt are two bookings, whatever their reference.
func TestAttack52TwoEntriesOfOneStatementWithOneReference(t *testing.T) {
	b, cs := x52books(t, "A52D-", 1)
	c := cs[0]
	doc := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52credit(c, "25.00", "INSTR-4711"),
		x52credit(c, "25.00", "INSTR-4711"),
	}})
	rep := x52run(t, b, x52fees, doc)
	x52want(t, b, rep, "two booked entries of one statement, one AcctSvcrRef", "posted_twice 1")
}

// 4b. The plain overlap: the camt.054 repeats the camt.053's entries with
// the same references. Counted once (sanity).
func TestAttack52Camt054RepeatingCamt053CountsOnce(t *testing.T) {
	b, c, d := x52two(t, "A52O-")
	entries := []x52ntry{x52credit(c, "25.00", "REF-"+c.ID), x52credit(d, "25.00", "REF-"+d.ID)}
	rep := x52run(t, b, x52fees,
		x52doc("053", "08", x52stmt{acct: x52fees, entries: entries}),
		x52doc("054", "08", x52stmt{acct: x52fees, entries: entries}))
	x52wantMatched(t, b, rep, "camt.054 repeating the camt.053", 2)
}

// 5. Pending entries are not postings: 1 booked, 2 pending (PDNG), and a
// PDNG reversal of 1 that must not cancel it (sanity).
func TestAttack52PendingIsNotPosted(t *testing.T) {
	b, c, d := x52two(t, "A52S-")
	pd := x52credit(d, "25.00", "REF-"+d.ID)
	pd.sts = "PDNG"
	rv := x52ntry{amt: "25.00", ind: "DBIT", rvsl: true, sts: "PDNG", ref: "RVSL-PD", txs: []x52tx{{e2e: c.ID, ref: "RVSL-PD", amt: "25.00", dbtr: c.AccountID}}}
	for _, ver := range []string{"02", "08", "13"} {
		rep := x52run(t, b, x52fees, x52doc("053", ver, x52stmt{acct: x52fees, entries: []x52ntry{x52credit(c, "25.00", "REF-"+c.ID), pd, rv}}))
		x52want(t, b, rep, "camt.053."+ver+": 1 booked, 2 pending, a pending reversal of 1", "recorded_not_posted 2")
	}
}

// 7. Amounts as banks write them: "25" and "0025.00" and "25.5" (a charge
// of 25.50) are the charge's amounts (sanity).
func TestAttack52AmountFormats(t *testing.T) {
	b := newBooks(t, memstore.New(), "A52F-")
	c1, c2, c3 := b.charge("1", 2500), b.charge("2", 2500), b.charge("3", 2550)
	for _, c := range []charge.Charge{c1, c2, c3} {
		b.done(t, c)
	}
	rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52credit(c1, "25", "R1"), x52credit(c2, "0025.00", "R2"), x52credit(c3, "25.5", "R3"),
	}}))
	x52want(t, b, rep, `"25", "0025.00", "25.5"`)
	if rep.Matched != 3 || rep.Unverified != 0 {
		t.Fatalf("matched %d (unverified %d), want 3 (0)", rep.Matched, rep.Unverified)
	}
}

// 8. Customers' side: several statements (one per account) in one file,
// and an account with no entry; a debit of another amount on one (sanity).
func TestAttack52SeveralAccountsCustomersSide(t *testing.T) {
	b, cs := x52books(t, "A52A-", 3)
	deb := func(c charge.Charge, amt string) x52ntry {
		return x52ntry{amt: amt, ind: "DBIT", ref: "REF-" + c.ID, bktx: "PMNT/IDDT/ESDD",
			txs: []x52tx{{e2e: c.ID, ustrd: c.DebitRequestFor(1).Narrative}}}
	}
	rep := x52run(t, b, "", x52doc("053", "04",
		x52stmt{acct: cs[0].AccountID, entries: []x52ntry{deb(cs[0], "25.00")}},
		x52stmt{acct: "0099999999999"},
		x52stmt{acct: cs[1].AccountID, entries: []x52ntry{deb(cs[1], "26.00")}},
		x52stmt{acct: cs[2].AccountID, entries: []x52ntry{deb(cs[2], "25.00")}},
	))
	x52want(t, b, rep, "three customers' statements, one debited 26.00", "amount_mismatch 2")
}

// 9. A credit on the collection account from another account than the
// charge's (DbtrAcct is not the customer's) under the charge's key: the
// fee was collected from the wrong customer.
func TestAttack52CreditFromAnotherAccount(t *testing.T) {
	b, cs := x52books(t, "A52W-", 1)
	c := cs[0]
	e := x52credit(c, "25.00", "REF-"+c.ID)
	e.txs[0].dbtr = "0077777777777"
	rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{e}}))
	x52want(t, b, rep, "credit from another account", "amount_mismatch 1")
}

// 11. Cross-currency details: the entry and TxAmt in the account's INR,
// the instructed amount in USD (sanity: the INR amount is the posting's).
func TestAttack52InstructedAmountInAnotherCurrency(t *testing.T) {
	b, c, d := x52two(t, "A52X-")
	e1 := x52credit(c, "25.00", "R-X1")
	e1.txs[0].amt, e1.txs[0].instd, e1.txs[0].instdCcy, e1.txs[0].txAmt = "", "0.30", "USD", "25.00"
	e2 := x52credit(d, "25.00", "R-X2")
	e2.txs[0].amt, e2.txs[0].instd, e2.txs[0].instdCcy = "", "0.30", "USD" // no TxAmt: the entry's Amt
	rep := x52run(t, b, x52fees, x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{e1, e2}}))
	x52wantMatched(t, b, rep, "InstdAmt USD beside INR amounts", 2)
}

// 12. Booked after the cut-off: the record was DONE on 12-01, the bank
// booked it 12-02 (value date 12-01). The 12-01 statement alone: one
// recorded_not_posted (documented); both days' statements together: matched.
func TestAttack52BookedAfterTheCutOff(t *testing.T) {
	b, c, d := x52two(t, "A52V-")
	late := x52credit(d, "25.00", "REF-"+d.ID)
	late.bookg, late.val = "2026-12-02", "2026-12-01"
	day1 := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{x52credit(c, "25.00", "REF-"+c.ID)}})
	day2 := x52doc("053", "08", x52stmt{acct: x52fees, from: "2026-12-02T00:00:00Z", to: "2026-12-02T23:59:59Z", entries: []x52ntry{late}})
	x52want(t, b, x52run(t, b, x52fees, day1), "12-01 alone", "recorded_not_posted 2")
	rep := x52run(t, b, x52fees, day1, day2)
	x52wantMatched(t, b, rep, "12-01 and 12-02 together", 2)
}

// 4. The camt.054 of the day notified each credit as it was booked (an
// entry a transaction, its own AcctSvcrRef); the camt.053 books them as a
// batch (one Ntry, Btch, its AcctSvcrRef; TxDtls without references). Both
// given for the day: the same credits read twice. The doc: "a camt.054
// repeating the camt.053 counts once".
func TestAttack52Camt054BesideBatchedCamt053DoubleCounts(t *testing.T) {
	b, c, d := x52two(t, "A52N-")
	n := c.DebitRequestFor(1).Narrative
	stmt053 := x52doc("053", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52batch("50.00", "BATCH-0009", x52in(c, n), x52in(d, n)),
	}})
	ntf054 := x52doc("054", "08", x52stmt{acct: x52fees, entries: []x52ntry{
		x52credit(c, "25.00", "NTF-000001"),
		x52credit(d, "25.00", "NTF-000002"),
	}})
	rep := x52run(t, b, x52fees, stmt053, ntf054)
	x52want(t, b, rep, "camt.053 (batch) and camt.054 (entry a transaction) of the same day")
}

// 10. A customers' side file that holds the bank's fee account too (a
// bank's export of every account of the branch): the fee account's
// return of the charge (a DBIT with RtrInf, no RvslInd) is read as a
// second DEBIT of the charge on the account FEES-001, and the customer's
// return cancels the customer's debit: the returned charge is reported as
// an amount_mismatch on the fee account, not as returned.
func TestAttack52CustomersSideFileWithTheFeeAccountsReturn(t *testing.T) {
	b, cs := x52books(t, "A52C-", 1)
	c := cs[0]
	n := c.DebitRequestFor(1).Narrative
	rep := x52run(t, b, "", x52doc("053", "08",
		x52stmt{acct: c.AccountID, entries: []x52ntry{
			{amt: "25.00", ind: "DBIT", ref: "REF-" + c.ID, txs: []x52tx{{e2e: c.ID, ustrd: n}}},
			{amt: "25.00", ind: "CRDT", ref: "RTN-CUST-1", txs: []x52tx{{e2e: c.ID, ref: "RTN-CUST-1", rtr: "MD06"}}},
		}},
		x52stmt{acct: x52fees, entries: []x52ntry{
			{amt: "25.00", ind: "CRDT", ref: "REF-FEES-1", txs: []x52tx{{e2e: c.ID, dbtr: c.AccountID, ustrd: n}}},
			{amt: "25.00", ind: "DBIT", ref: "RTN-FEES-1", bktx: "PMNT/IDDT/UPDD", txs: []x52tx{{e2e: c.ID, ref: "RTN-FEES-1", dbtr: c.AccountID, rtr: "MD06"}}},
		}},
	))
	x52want(t, b, rep, "customer's debit returned MD06; the file also holds the fee account's credit and return", "recorded_not_posted 1")
}
