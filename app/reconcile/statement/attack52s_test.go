package statement_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// Attack 52s: reconciliation compares a posting's amount with the
// record's summary, so the amount read must be the one booked. A
// transaction that gives two amounts of the account's currency that
// disagree — TxDtls/Amt and AmtDtls/TxAmt/Amt — in a batch whose
// transactions still sum to the entry (25.00 + 25.00 = 26.00 + 24.00):
// the reader took TxDtls/Amt and dropped TxAmt, so a customer booked
// 26.00 matched a charge of 25.00. It refuses such a transaction; two
// amounts that agree, or a TxAmt in another currency (the instructed side
// of a conversion), are read as before.
func TestAttack52sTransactionAmountsThatDisagreeAreRefused(t *testing.T) {
	doc := func(tx1, tx2 string) string {
		return `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt>
<GrpHdr><MsgId>M</MsgId><CreDtTm>2026-12-02T01:00:00Z</CreDtTm></GrpHdr>
<Stmt><Id>S</Id><CreDtTm>2026-12-02T01:00:00Z</CreDtTm>
<FrToDt><FrDtTm>2026-12-01T00:00:00Z</FrDtTm><ToDtTm>2026-12-01T23:59:59Z</ToDtTm></FrToDt>
<Acct><Id><Othr><Id>FEES-001</Id></Othr></Id></Acct>
<Ntry><Amt Ccy="INR">50.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>2026-12-01</Dt></BookgDt><AcctSvcrRef>B-1</AcctSvcrRef>
<NtryDtls><Btch><NbOfTxs>2</NbOfTxs></Btch>
<TxDtls><Refs><EndToEndId>CHG-1</EndToEndId></Refs>` + tx1 + `<RltdPties><DbtrAcct><Id><Othr><Id>001234567890</Id></Othr></Id></DbtrAcct></RltdPties></TxDtls>
<TxDtls><Refs><EndToEndId>CHG-2</EndToEndId></Refs>` + tx2 + `<RltdPties><DbtrAcct><Id><Othr><Id>001234567891</Id></Othr></Id></DbtrAcct></RltdPties></TxDtls>
</NtryDtls></Ntry></Stmt></BkToCstmrStmt></Document>`
	}
	amts := func(amt, txAmt, ccy string) string {
		return fmt.Sprintf(`<Amt Ccy="INR">%s</Amt><AmtDtls><TxAmt><Amt Ccy="%s">%s</Amt></TxAmt></AmtDtls>`, amt, ccy, txAmt)
	}
	for _, tc := range []struct {
		name     string
		tx1, tx2 string
		refused  bool
	}{
		{"Amt 25.00 and TxAmt 26.00, Amt 25.00 and TxAmt 24.00", amts("25.00", "26.00", "INR"), amts("25.00", "24.00", "INR"), true},
		{"amounts that agree", amts("25.00", "25.00", "INR"), amts("25.00", "25.00", "INR"), false},
		{"a TxAmt in another currency", amts("25.00", "0.30", "USD"), amts("25.00", "0.30", "USD"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			_, err := statement.Read(strings.NewReader(doc(tc.tx1, tc.tx2)), "s.xml", statement.Options{CollectionAccount: "FEES-001"}, func(p statement.Posting) error {
				got = append(got, p.BankKey+" "+p.Amount.String())
				return nil
			})
			var fe *statement.FormatError
			switch {
			case tc.refused && !errors.As(err, &fe):
				t.Fatalf("read %q, err %v; want the transaction refused (FormatError)", got, err)
			case !tc.refused && (err != nil || strings.Join(got, ", ") != "CHG-1 INR 25.00, CHG-2 INR 25.00"):
				t.Fatalf("read %q, err %v; want both at 25.00", got, err)
			}
		})
	}
}
