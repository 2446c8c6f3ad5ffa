package statement_test

import (
	"fmt"
	"strings"

	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

func ExampleRead() {
	const camt053 = `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08">
 <BkToCstmrStmt>
  <Stmt>
   <Acct><Id><IBAN>GB33BUKB20201555555555</IBAN></Id></Acct>
   <Ntry>
    <Amt Ccy="INR">25.00</Amt>
    <CdtDbtInd>CRDT</CdtDbtInd>
    <Sts><Cd>BOOK</Cd></Sts>
    <BookgDt><Dt>2026-12-01</Dt></BookgDt>
    <AcctSvcrRef>BNK-1</AcctSvcrRef>
    <NtryDtls><TxDtls>
     <Refs><EndToEndId>chg-1001~2</EndToEndId></Refs>
     <RltdPties><DbtrAcct><Id><Othr><Id>001234567890</Id></Othr></Id></DbtrAcct></RltdPties>
     <RmtInf><Ustrd>SMS_ALERT_FEE 2026-12-01</Ustrd></RmtInf>
    </TxDtls></NtryDtls>
   </Ntry>
  </Stmt>
 </BkToCstmrStmt>
</Document>`
	h, err := statement.Read(strings.NewReader(camt053), "stmt.xml",
		statement.Options{CollectionAccount: "GB33BUKB20201555555555"},
		func(p statement.Posting) error {
			fmt.Println(p.BankKey, p.Account, p.Amount, p.Reversal, p.BookingDate.Format("2006-01-02"), p.Reference, p.Narrative)
			return nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.Format, h.Entries, h.Postings)
	// Output:
	// chg-1001~2 001234567890 INR 25.00 false 2026-12-01 BNK-1 SMS_ALERT_FEE 2026-12-01
	// camt.053.001.08 1 1
}
