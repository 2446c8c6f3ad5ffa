package statement

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// custDoc is a camt.053.001.02 of customers' own accounts (one Stmt per
// account), each with one booked debit under the given key.
func custDoc(accounts []string, keys []string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrStmt>
<GrpHdr><MsgId>M1</MsgId><CreDtTm>2026-12-02T01:00:00Z</CreDtTm></GrpHdr>`)
	for i, a := range accounts {
		fmt.Fprintf(&b, `
<Stmt><Id>S%d</Id><FrToDt><FrDtTm>2026-12-01T00:00:00Z</FrDtTm><ToDtTm>2026-12-01T23:59:59Z</ToDtTm></FrToDt>
<Acct><Id><IBAN>%s</IBAN></Id></Acct>
<Ntry><Amt Ccy="INR">25.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts>BOOK</Sts><BookgDt><Dt>2026-12-01</Dt></BookgDt><AcctSvcrRef>R%d</AcctSvcrRef>
<NtryDtls><TxDtls><Refs><EndToEndId>%s</EndToEndId></Refs></TxDtls></NtryDtls></Ntry>
</Stmt>`, i, a, i, keys[i])
	}
	b.WriteString("\n</BkToCstmrStmt></Document>\n")
	return b.String()
}

// The customers' statements read with a --collection-account that is not in
// the file: the error lists every customer's account in full ("accounts
// found: …"), and the command line prints it to stderr (and so to CI logs,
// cron mail, the console's error banner).
func TestAttackAccountNotFoundErrorPrintsCustomerAccountsWhole(t *testing.T) {
	accts := []string{"DE89370400440532013000", "GB29NWBK60161331926819"}
	doc := custDoc(accts, []string{"CHG-1", "CHG-2"})
	_, err := Read(strings.NewReader(doc), "cust.xml", Options{CollectionAccount: "FEES-001"}, func(Posting) error { return nil })
	if err == nil {
		t.Fatal("no error")
	}
	for _, a := range accts {
		if strings.Contains(err.Error(), a) {
			t.Fatalf("the error names customer account %s whole: %v", a, err)
		}
	}
}

// A document that declares an encoding the reader does not take is bad
// input, but the error is not a *FormatError (no line, and the command line
// exits 1 — "breaks found" — instead of 2).
func TestAttackUnsupportedEncodingIsNotAFormatError(t *testing.T) {
	doc := strings.Replace(custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"}), `encoding="UTF-8"`, `encoding="windows-1252"`, 1)
	_, err := Read(strings.NewReader(doc), "enc.xml", Options{}, func(Posting) error { return nil })
	var fe *FormatError
	if err == nil || !errors.As(err, &fe) {
		t.Fatalf("encoding windows-1252: %T %v, want a *FormatError", err, err)
	}
}

// Two camt documents in one file (two messages concatenated, or a file
// with junk after </Document>): the reader stops at the first
// </Document>, returns no error, and the second statement's postings are
// silently lost (a double debit in it is never seen).
func TestAttackContentAfterDocumentIsIgnoredSilently(t *testing.T) {
	first := custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"})
	second := strings.TrimPrefix(custDoc([]string{"GB29NWBK60161331926819"}, []string{"CHG-2"}), `<?xml version="1.0" encoding="UTF-8"?>`)
	var keys []string
	_, err := Read(strings.NewReader(first+second), "two.xml", Options{}, func(p Posting) error {
		keys = append(keys, p.BankKey)
		return nil
	})
	if err == nil && len(keys) != 2 {
		t.Fatalf("two documents in one file: no error, postings %q (CHG-2 dropped silently)", keys)
	}
}

// Elements are matched by local name only: an Ntry in a foreign namespace
// (an extension block, a vendor's <x:Ntry> inside SplmtryData handled
// elsewhere) is read as a posting of ours.
func TestAttackForeignNamespaceElementsAreReadAsCamt(t *testing.T) {
	doc := custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"})
	doc = strings.Replace(doc, "<Ntry>", `<Ntry xmlns="urn:example:not-iso">`, 1)
	n := 0
	_, err := Read(strings.NewReader(doc), "ns.xml", Options{}, func(Posting) error { n++; return nil })
	if err == nil && n > 0 {
		t.Fatalf("an Ntry in namespace urn:example:not-iso gave %d posting(s) of ours", n)
	}
}

// The XML reader trims the bank key and account (xs:token); the CSV
// reader keeps them as written: an export with padded cells gives the key
// " CHG-1 ", which matches no record (unknown_posting, and the charge's
// recorded_not_posted) — or an error would say why.
func TestAttackCSVKeepsPaddingInKeys(t *testing.T) {
	csv := "booking_date,bank_key,account,amount_minor,currency,reference,reversal\n2026-12-01, CHG-1 , 001234567890 ,2500,INR,R1,\n"
	var got []Posting
	_, err := Read(strings.NewReader(csv), "pad.csv", Options{}, func(p Posting) error { got = append(got, p); return nil })
	if err == nil && len(got) == 1 && got[0].BankKey != "CHG-1" {
		t.Fatalf("CSV bank key read as %q (the XML reader would give \"CHG-1\"), no error", got[0].BankKey)
	}
}
