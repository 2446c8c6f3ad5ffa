package statement

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// An encoding the reader does not take is a *FormatError of the file at
// line 1 that says which encoding, wrapping the CharsetReader's error.
func TestUnsupportedEncodingFormatError(t *testing.T) {
	doc := strings.Replace(custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"}), `encoding="UTF-8"`, `encoding="windows-1252"`, 1)
	_, err := Read(strings.NewReader(doc), "enc.xml", Options{}, func(Posting) error { return nil })
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %T %v, want a *FormatError", err, err)
	}
	if fe.File != "enc.xml" || fe.Line != 1 || fe.Err == nil || errors.Unwrap(fe.Err) == nil {
		t.Errorf("got %#v, want enc.xml line 1 wrapping the CharsetReader's error", fe)
	}
	if want := `encoding "windows-1252" is not read (UTF-8, ISO-8859-1 or US-ASCII)`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// After </Document> only white space, comments and processing
// instructions may follow; a second document or text is a FormatError.
func TestContentAfterDocument(t *testing.T) {
	first := custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"})
	second := custDoc([]string{"GB29NWBK60161331926819"}, []string{"CHG-2"})
	for _, tt := range []struct {
		name, tail string
		ok         bool
	}{
		{"misc", "\n<!-- end -->\n<?bank trailer?>\n\n", true},
		{"second document", strings.TrimPrefix(second, `<?xml version="1.0" encoding="UTF-8"?>`), false},
		{"second document with its declaration", second, false},
		{"text", "trailing junk\n", false},
		{"element", "<x/>", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(first+tt.tail), "two.xml", Options{}, func(Posting) error { return nil })
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "two.xml" || fe.Line == 0 {
				t.Fatalf("error %v, want a *FormatError with its line", err)
			}
			t.Log(err)
		})
	}
}

// Elements are matched by namespace as well as local name: one in another
// namespace is skipped as unknown; a prefix bound to the camt namespace is
// camt.
func TestForeignNamespaceElementsSkipped(t *testing.T) {
	doc := custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"})
	for _, tt := range []struct {
		name, old, new string
		keys           []string
		unkeyed        int
	}{
		{"foreign Ntry", "<Ntry>", `<Ntry xmlns="urn:example:not-iso">`, nil, 0},
		{"foreign Stmt", "<Stmt>", `<Stmt xmlns="urn:example:not-iso">`, nil, 0},
		{"foreign EndToEndId", "<EndToEndId>CHG-1</EndToEndId>", `<x:EndToEndId xmlns:x="urn:example:not-iso">CHG-1</x:EndToEndId>`, nil, 1},
		{"foreign Sts/Cd", "<Sts>BOOK</Sts>", `<Sts><x:Cd xmlns:x="urn:example:not-iso">BOOK</x:Cd>BOOK</Sts>`, []string{"CHG-1"}, 0},
		{"camt prefix", "<EndToEndId>CHG-1</EndToEndId>", `<c:EndToEndId xmlns:c="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02">CHG-1</c:EndToEndId>`, []string{"CHG-1"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := strings.Replace(doc, tt.old, tt.new, 1)
			var keys []string
			h, err := Read(strings.NewReader(d), "ns.xml", Options{}, func(p Posting) error { keys = append(keys, p.BankKey); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(keys, ",") != strings.Join(tt.keys, ",") || h.Unkeyed != tt.unkeyed {
				t.Errorf("keys %q unkeyed %d, want %q unkeyed %d", keys, h.Unkeyed, tt.keys, tt.unkeyed)
			}
		})
	}
	// An Amt whose Ccy is in another namespace has no Ccy.
	d := strings.Replace(doc, `<Amt Ccy="INR">`, `<Amt xmlns:x="urn:example:not-iso" x:Ccy="INR">`, 1)
	_, err := Read(strings.NewReader(d), "ns.xml", Options{}, func(Posting) error { return nil })
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Elem != "Ntry/Amt" {
		t.Errorf("foreign Ccy: %v, want a FormatError of Ntry/Amt", err)
	}
}

// The CSV reader trims the text columns as the camt reader does; a key or
// account of white space only is empty.
func TestCSVTrimsTextColumns(t *testing.T) {
	const head = "booking_date,bank_key,account,amount_minor,currency,reference,reversal,narrative\n"
	var got []Posting
	_, err := Read(strings.NewReader(head+"2026-12-01,\t CHG-1 , 001234567890 ,2500,INR, R1 ,, SMS_ALERT_FEE 2026-12-01 \n"), "pad.csv", Options{}, func(p Posting) error { got = append(got, p); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].BankKey != "CHG-1" || got[0].Account != "001234567890" || got[0].Reference != "R1" || got[0].Narrative != "SMS_ALERT_FEE 2026-12-01" {
		t.Fatalf("got %+v", got)
	}
	for col, row := range map[string]string{
		"bank_key": "2026-12-01,  ,001234567890,2500,INR,R1,,\n",
		"account":  "2026-12-01,CHG-1, \t,2500,INR,R1,,\n",
	} {
		_, err := Read(strings.NewReader(head+row), "pad.csv", Options{}, func(Posting) error { return nil })
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Elem != col || fe.Line != 2 {
			t.Errorf("%s of spaces: %v, want a FormatError of %s at line 2", col, err, col)
		}
	}
}

// endless is an endless run of one byte.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

// The text of an element kept is bounded: 64 KiB for a narrative, 1 KiB
// for the rest; beyond, a FormatError names the element.
func TestElementTextBounded(t *testing.T) {
	doc := custDoc([]string{"DE89370400440532013000"}, []string{"CHG-1"})
	ustrd := func(texts ...string) string {
		var b strings.Builder
		b.WriteString("</Refs><RmtInf>")
		for _, s := range texts {
			b.WriteString("<Ustrd>" + s + "</Ustrd>")
		}
		b.WriteString("</RmtInf>")
		return strings.Replace(doc, "</Refs>", b.String(), 1)
	}
	big := strings.Repeat("x", maxText)
	for _, tt := range []struct {
		name, doc, elem string
	}{
		{"Ustrd at the limit", ustrd(big), ""},
		{"Ustrd over the limit", ustrd(big + "x"), "TxDtls/RmtInf/Ustrd"},
		{"Ustrd together over the limit", ustrd(big[:maxText/2], big[:maxText/2]), "TxDtls/RmtInf/Ustrd"},
		{"AddtlTxInf over the limit", strings.Replace(doc, "</Refs>", "</Refs><AddtlTxInf>"+big+"x</AddtlTxInf>", 1), "TxDtls/AddtlTxInf"},
		{"AddtlNtryInf over the limit", strings.Replace(doc, "<NtryDtls>", "<AddtlNtryInf>"+big+"x</AddtlNtryInf><NtryDtls>", 1), "Ntry/AddtlNtryInf"},
		{"EndToEndId at the limit", strings.Replace(doc, "CHG-1", strings.Repeat("k", maxShort), 1), ""},
		{"EndToEndId over the limit", strings.Replace(doc, "CHG-1", strings.Repeat("k", maxShort+1), 1), "TxDtls/Refs/EndToEndId"},
		{"EndToEndId over the limit in CDATA pieces", strings.Replace(doc, "CHG-1", strings.Repeat("<![CDATA[kkkkkkkk]]>", maxShort/8+1), 1), "TxDtls/Refs/EndToEndId"},
		{"IBAN over the limit", strings.Replace(doc, "DE89370400440532013000", strings.Repeat("1", 2*maxShort), 1), "Stmt/Acct/Id/IBAN"},
		{"Amt over the limit", strings.Replace(doc, "25.00", strings.Repeat("0", maxShort)+"25.00", 1), "Ntry/Amt"},
		{"Sts over the limit", strings.Replace(doc, "<Sts>BOOK", "<Sts>"+strings.Repeat(" ", maxShort)+"BOOK", 1), "Ntry/Sts"},
		{"AcctSvcrRef over the limit", strings.Replace(doc, "<AcctSvcrRef>R0", "<AcctSvcrRef>"+strings.Repeat("R", maxShort+1), 1), "Ntry/AcctSvcrRef"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []Posting
			_, err := Read(strings.NewReader(tt.doc), "big.xml", Options{}, func(p Posting) error { got = append(got, p); return nil })
			if tt.elem == "" {
				if err != nil || len(got) != 1 {
					t.Fatalf("error %v, postings %d", err, len(got))
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Elem != tt.elem || fe.Line == 0 || !strings.Contains(fe.Err.Error(), "longer than") {
				t.Fatalf("error %v, want a FormatError of %s saying it is too long", err, tt.elem)
			}
		})
	}
}

// Whatever the decoder would buffer whole — a text, a tag, a comment, a
// CDATA section — is refused past maxToken bytes as it is read, so an
// endless one ends in a FormatError, not in memory exhausted; so are
// elements nested past maxDepth.
func TestEndlessPieceRefused(t *testing.T) {
	const head = `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.02"><BkToCstmrStmt><GrpHdr><MsgId>`
	latin := strings.Replace(head, "UTF-8", "ISO-8859-1", 1)
	for _, tt := range []struct {
		name string
		r    io.Reader
		msg  string
	}{
		{"text of a skipped element", io.MultiReader(strings.NewReader(head), endless('a')), "a text longer than"},
		{"text, ISO-8859-1", io.MultiReader(strings.NewReader(latin), endless(0xe9)), "a text longer than"},
		{"text between elements", io.MultiReader(strings.NewReader(head+"M</MsgId>"), endless(' ')), "a text longer than"},
		{"comment", io.MultiReader(strings.NewReader(head+"<!--"), endless('<')), "a comment longer than"},
		{"CDATA", io.MultiReader(strings.NewReader(head+"<![CDATA["), endless('<')), "a CDATA section longer than"},
		{"tag", io.MultiReader(strings.NewReader(head+`<x a="`), endless('>')), "a tag longer than"},
		{"processing instruction", io.MultiReader(strings.NewReader(head+`<?p `), endless('>')), "a processing instruction longer than"},
		{"nesting", strings.NewReader(head + strings.Repeat("<x>", maxDepth)), "nested deeper than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(tt.r, "endless.xml", Options{}, func(Posting) error { return nil })
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "endless.xml" || fe.Line == 0 || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want a FormatError saying %q", err, tt.msg)
			}
			t.Log(err)
		})
	}
}

// The CSV reader bounds its cells as the camt reader bounds its text, and
// a record as it is read.
func TestCSVBounded(t *testing.T) {
	const head = "booking_date,bank_key,account,amount_minor,currency,reference,reversal,narrative\n"
	row := func(key, acct, ref, narr string) string {
		return head + "2026-12-01," + key + "," + acct + ",2500,INR," + ref + ",," + narr + "\n"
	}
	long := strings.Repeat("k", maxShort+1)
	for _, tt := range []struct {
		name, csv, elem string
	}{
		{"at the limits", row(long[1:], long[1:], long[1:], strings.Repeat("n", maxText)), ""},
		{"bank_key", row(long, "A1", "R1", ""), "bank_key"},
		{"account", row("CHG-1", long, "R1", ""), "account"},
		{"reference", row("CHG-1", "A1", long, ""), "reference"},
		{"narrative", row("CHG-1", "A1", "R1", strings.Repeat("n", maxText+1)), "narrative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.csv), "big.csv", Options{}, func(Posting) error { return nil })
			if tt.elem == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Elem != tt.elem || fe.Line != 2 {
				t.Fatalf("error %v, want a FormatError of %s at line 2", err, tt.elem)
			}
		})
	}
	for name, r := range map[string]io.Reader{
		"endless line":         io.MultiReader(strings.NewReader(head+"2026-12-01,"), endless('k')),
		"endless quoted field": io.MultiReader(strings.NewReader(head+`2026-12-01,"`), endless('\n')),
	} {
		_, err := Read(r, "endless.csv", Options{}, func(Posting) error { return nil })
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Elem != "record" || fe.Line < 2 || !strings.Contains(err.Error(), "longer than") {
			t.Errorf("%s: %v, want a FormatError of a record too long", name, err)
		}
		t.Log(err)
	}
}

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
