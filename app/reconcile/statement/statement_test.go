package statement

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

func day(s string) time.Time {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return t
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func money(minor int64, cur charge.Currency) charge.Money {
	return charge.Money{Minor: minor, Currency: cur}
}

// readAll reads a file whole; Where is cleared (checked on its own).
func readAll(t *testing.T, path string, opts Options) (Header, []Posting, error) {
	t.Helper()
	var got []Posting
	h, err := ReadFile(path, opts, func(p Posting) error {
		p.Where = ""
		got = append(got, p)
		return nil
	})
	return h, got, err
}

func TestReadGolden(t *testing.T) {
	type P = Posting
	const (
		de = "DE89370400440532013000"
		gb = "GB82WEST12345698765432"
		fr = "FR1420041010050500013M02606"
		bh = "BH67BMAG00001299123456"
	)
	tests := []struct {
		file   string
		opts   Options
		header Header
		want   []Posting
	}{
		{
			file: "camt053_001_02_collection.xml",
			opts: Options{CollectionAccount: "gb33 bukb 2020 1555 5555 55"},
			header: Header{Format: "camt.053.001.02", Period: Period{ts("2026-11-30T18:30:00Z"), ts("2026-12-02T18:30:00Z")},
				Entries: 6, Postings: 4, Unkeyed: 2},
			want: []Posting{
				{BankKey: "chg-1001", Account: de, Amount: money(2500, "INR"), BookingDate: day("2026-12-01"), Reference: "BNK-0001-1", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				{BankKey: "chg-1002~2", Account: gb, Amount: money(10000, "INR"), BookingDate: day("2026-12-01"), Reference: "BNK-0002", Narrative: "CHEQUE_BOOK_FEE 2026-12-01"},
				{BankKey: "chg-1003", Account: fr, Amount: money(5000, "INR"), BookingDate: day("2026-12-01"), Reference: "BNK-0002-2", Narrative: "LOCKER_RENT 2026-12-01"},
				{BankKey: "chg-1001", Account: de, Amount: money(2500, "INR"), Reversal: true, BookingDate: day("2026-12-02"), Reference: "BNK-0003", Narrative: "REVERSAL SMS_ALERT_FEE"},
			},
		},
		{
			file: "camt053_001_08_collection.xml",
			opts: Options{CollectionAccount: "FEECOLL-TOKYO-01"},
			header: Header{Format: "camt.053.001.08", Period: Period{ts("2026-12-01T00:00:00Z"), ts("2026-12-02T00:00:00Z")},
				Entries: 4, Postings: 4},
			want: []Posting{
				{BankKey: "chg-2001", Account: "0012345678", Amount: money(500, "JPY"), BookingDate: day("2026-12-01"), Reference: "JP-0001", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				// BookgDt/DtTm 2026-12-01T23:30:00+09:00: the bank's day.
				{BankKey: "chg-2002", Account: "0023456789", Amount: money(1000, "JPY"), BookingDate: day("2026-12-01"), Reference: "JP-0002-1", Narrative: "CHEQUE_BOOK_FEE 2026-12-01"},
				{BankKey: "chg-2003~3", Account: "0034567890", Amount: money(500, "JPY"), BookingDate: day("2026-12-01"), Reference: "JP-0002-2", Narrative: "LOCKER_RENT 2026-12-01"},
				{BankKey: "chg-2001", Account: "0012345678", Amount: money(500, "JPY"), Reversal: true, BookingDate: day("2026-12-01"), Reference: "JP-0003", Narrative: "RETURN SMS_ALERT_FEE 2026-12-01"},
			},
		},
		{
			file: "camt053_001_13_customer.xml",
			header: Header{Format: "camt.053.001.13", Period: Period{ts("2026-11-30T00:00:00Z"), ts("2026-12-02T00:00:00Z")},
				Entries: 5, Postings: 5},
			want: []Posting{
				{BankKey: "chg-3001", Account: bh, Amount: money(1500, "BHD"), BookingDate: day("2026-12-01"), Reference: "BH-0001", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				{BankKey: "chg-3002", Account: bh, Amount: money(10000, "BHD"), BookingDate: day("2026-12-01"), Reference: "BH-0002-1", Narrative: "CHEQUE_BOOK_FEE 2026-12-01"},
				{BankKey: "chg-3003~2", Account: bh, Amount: money(2250, "BHD"), BookingDate: day("2026-12-01"), Reference: "BH-0002-2", Narrative: "LOCKER_RENT 2026-12-01"},
				{BankKey: "chg-3001", Account: bh, Amount: money(1500, "BHD"), Reversal: true, BookingDate: day("2026-12-01"), Reference: "BH-0003", Narrative: "REVERSAL OF SMS_ALERT_FEE"},
				{BankKey: "chg-3005", Account: "BH-ACC-000777", Amount: money(750, "BHD"), BookingDate: day("2026-11-30"), Reference: "BH-0006", Narrative: "SMS_ALERT_FEE 2026-11-30"},
			},
		},
		{
			file: "camt054_001_02_customer.xml",
			header: Header{Format: "camt.054.001.02", Period: Period{ts("2026-11-30T18:30:00Z"), ts("2026-12-01T12:30:00Z")},
				Entries: 5, Postings: 5},
			want: []Posting{
				{BankKey: "chg-4001", Account: "001234567890", Amount: money(2500, "INR"), BookingDate: day("2026-12-01"), Reference: "IN-0001", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				{BankKey: "chg-4002", Account: "001234567890", Amount: money(20000, "INR"), BookingDate: day("2026-12-01"), Reference: "IN-0002-1", Narrative: "CHEQUE_BOOK_FEE 2026-12-01"},
				{BankKey: "chg-4003", Account: "001234567890", Amount: money(10000, "INR"), BookingDate: day("2026-12-01"), Reference: "IN-0002-2", Narrative: "LOCKER_RENT 2026-12-01"},
				{BankKey: "chg-4001", Account: "001234567890", Amount: money(2500, "INR"), Reversal: true, BookingDate: day("2026-12-01"), Reference: "IN-0003", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				{BankKey: "chg-4005~2", Account: "009876543210", Amount: money(4500, "INR"), BookingDate: day("2026-12-01"), Reference: "IN-0005", Narrative: "SMS_ALERT_FEE 2026-11-01"},
			},
		},
		{
			file: "camt054_001_08_customer.xml",
			header: Header{Format: "camt.054.001.08", Period: Period{ts("2026-12-01T05:00:00Z"), ts("2026-12-02T03:00:00Z")},
				Entries: 5, Postings: 5},
			want: []Posting{
				{BankKey: "chg-5001", Account: "ACC-5001", Amount: money(1250, "USD"), BookingDate: day("2026-12-01"), Reference: "US-0001", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				{BankKey: "chg-5002", Account: "ACC-5001", Amount: money(2000, "USD"), BookingDate: day("2026-12-01"), Reference: "US-0002", Narrative: "CHEQUE_BOOK_FEE 2026-12-01"},
				{BankKey: "chg-5003", Account: "ACC-5001", Amount: money(1000, "USD"), BookingDate: day("2026-12-01"), Reference: "US-0002", Narrative: "LOCKER_RENT 2026-12-01"},
				{BankKey: "chg-5001", Account: "ACC-5001", Amount: money(1250, "USD"), Reversal: true, BookingDate: day("2026-12-01"), Reference: "US-0003"},
				{BankKey: "chg-5004~2", Account: "ACC-5002", Amount: money(500, "USD"), BookingDate: day("2026-12-01"), Reference: "US-0006"},
			},
		},
		{
			// The customers' side of the collection account's file: its
			// only debit that is not a reversal is the bank's sweep.
			file: "camt053_001_02_collection.xml",
			header: Header{Format: "camt.053.001.02", Period: Period{ts("2026-10-31T18:30:00Z"), ts("2026-12-31T18:30:00Z")},
				Entries: 7, Postings: 1},
			want: []P{
				{BankKey: "SWEEP-1", Account: "GB33BUKB20201555555555", Amount: money(9900, "INR"), BookingDate: day("2026-12-02"), Reference: "BNK-0005"},
			},
		},
		{
			file:   "customer_debits.csv",
			opts:   Options{CollectionAccount: "ignored for the CSV export"},
			header: Header{Format: "csv", Entries: 4, Postings: 4},
			want: []Posting{
				{BankKey: "chg-6001", Account: "001234567890", Amount: money(2500, "INR"), BookingDate: day("2026-12-01"), Reference: "BNK-9001", Narrative: "SMS_ALERT_FEE 2026-12-01"},
				{BankKey: "chg-6002~2", Account: "DE89370400440532013000", Amount: money(15000, "INR"), BookingDate: day("2026-12-01"), Reference: "BNK-9002", Narrative: "CHEQUE_BOOK_FEE, 2026-12-01"},
				{BankKey: "chg-6001", Account: "001234567890", Amount: money(2500, "INR"), Reversal: true, BookingDate: day("2026-12-02"), Reference: "BNK-9003"},
				{BankKey: "chg-6003", Account: "ACC-7", Amount: money(1500, "BHD"), BookingDate: day("2026-12-02"), Narrative: `LOCKER_RENT "DEC"`},
			},
		},
		{
			file:   "customer_debits_7col.csv",
			header: Header{Format: "csv", Entries: 2, Postings: 2},
			want: []Posting{
				{BankKey: "chg-6001", Account: "001234567890", Amount: money(2500, "INR"), BookingDate: day("2026-12-01"), Reference: "BNK-9001"},
				{BankKey: "chg-6004", Account: "ACC-8", Amount: money(500, "JPY"), BookingDate: day("2026-12-03"), Reference: "BNK-9004"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.opts.CollectionAccount, func(t *testing.T) {
			h, got, err := readAll(t, filepath.Join("testdata", tt.file), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("postings:\n got %+v\nwant %+v", got, tt.want)
			}
			if !h.Period.From.Equal(tt.header.Period.From) || !h.Period.To.Equal(tt.header.Period.To) {
				t.Errorf("period [%v, %v), want [%v, %v)", h.Period.From, h.Period.To, tt.header.Period.From, tt.header.Period.To)
			}
			h.Period, tt.header.Period = Period{}, Period{}
			if h != tt.header {
				t.Errorf("header %+v, want %+v", h, tt.header)
			}
		})
	}
}

func TestWhere(t *testing.T) {
	path := filepath.Join("testdata", "camt053_001_02_collection.xml")
	var where []string
	_, err := ReadFile(path, Options{CollectionAccount: "GB33BUKB20201555555555"}, func(p Posting) error {
		where = append(where, p.Where)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		path + ":40: entry 1, transaction 1",
		path + ":69: entry 2, transaction 1",
		path + ":77: entry 2, transaction 2",
		path + ":101: entry 3, transaction 1",
	}
	if !reflect.DeepEqual(where, want) {
		t.Errorf("Where:\n got %q\nwant %q", where, want)
	}
	var csvWhere []string
	path = filepath.Join("testdata", "customer_debits_7col.csv")
	if _, err := ReadFile(path, Options{}, func(p Posting) error { csvWhere = append(csvWhere, p.Where); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{path + ": line 2", path + ": line 3"}; !reflect.DeepEqual(csvWhere, want) {
		t.Errorf("Where: got %q, want %q", csvWhere, want)
	}
}

// good is a small camt.053.001.08 of the collection account; the
// malformed cases below replace a piece of it. Its lines are numbered in
// the cases' expectations.
const good = `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08">
<BkToCstmrStmt>
<Stmt>
<Acct><Id><IBAN>GB33BUKB20201555555555</IBAN></Id></Acct>
<Ntry>
<Amt Ccy="INR">25.00</Amt>
<CdtDbtInd>CRDT</CdtDbtInd>
<Sts><Cd>BOOK</Cd></Sts>
<BookgDt><Dt>2026-12-01</Dt></BookgDt>
<NtryDtls>
<TxDtls>
<Refs><EndToEndId>chg-1</EndToEndId></Refs>
<Amt Ccy="INR">25.00</Amt>
<RltdPties><DbtrAcct><Id><Othr><Id>0001</Id></Othr></Id></DbtrAcct></RltdPties>
</TxDtls>
</NtryDtls>
</Ntry>
</Stmt>
</BkToCstmrStmt>
</Document>
`

const secondTx = `</TxDtls>
<TxDtls>
<Refs><EndToEndId>chg-2</EndToEndId></Refs>
<Amt Ccy="INR">10.00</Amt>
<RltdPties><DbtrAcct><Id><Othr><Id>0002</Id></Othr></Id></DbtrAcct></RltdPties>
</TxDtls>`

func TestReadMalformed(t *testing.T) {
	twoTx := strings.Replace(good, "</TxDtls>", secondTx, 1)
	coll := Options{CollectionAccount: "GB33BUKB20201555555555"}
	tests := []struct {
		name     string
		base     string // "": good
		old, new string // replaced in base ("" and "": base as is)
		cut      int    // >0: only the first cut bytes
		opts     Options
		line     int
		elem     string
		msg      string // the FormatError's Err
	}{
		{name: "bad amount text", old: `<Amt Ccy="INR">25.00</Amt>
<CdtDbtInd>`, new: `<Amt Ccy="INR">25,00</Amt>
<CdtDbtInd>`, opts: coll, line: 7, elem: "Ntry/Amt", msg: `"25,00" is not a decimal amount`},
		{name: "too many decimals", old: `<Amt Ccy="INR">25.00</Amt>
<RltdPties>`, new: `<Amt Ccy="INR">25.001</Amt>
<RltdPties>`, opts: coll, line: 14, elem: "TxDtls/Amt", msg: `"25.001" has 3 decimals, INR has 2`},
		{name: "missing Ccy", old: `<Amt Ccy="INR">25.00</Amt>
<CdtDbtInd>`, new: `<Amt>25.00</Amt>
<CdtDbtInd>`, opts: coll, line: 7, elem: "Ntry/Amt", msg: "no Ccy attribute"},
		{name: "unknown currency", old: `<Amt Ccy="INR">25.00</Amt>
<CdtDbtInd>`, new: `<Amt Ccy="XYZ">25.00</Amt>
<CdtDbtInd>`, opts: coll, line: 7, elem: "Ntry/Amt", msg: `"XYZ" is not a known ISO-4217 currency`},
		{name: "unknown version", old: "camt.053.001.08", new: "camt.053.001.14", opts: coll, line: 2, elem: "Document",
			msg: `camt.053: version "14" is not one this reader knows (.001.02 to .001.13)`},
		{name: "unknown message", old: "camt.053.001.08", new: "camt.052.001.08", opts: coll, line: 2, elem: "Document",
			msg: "message camt.052.001.08 is not a statement this reader knows (camt.053 or camt.054)"},
		{name: "no namespace", old: ` xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"`, new: "", opts: coll, line: 2, elem: "Document",
			msg: "the Document has no namespace: not an ISO 20022 message"},
		{name: "body of the other message", old: "BkToCstmrStmt", new: "BkToCstmrDbtCdtNtfctn", opts: coll, line: 3, elem: "Document/BkToCstmrDbtCdtNtfctn",
			msg: "not the body of a camt.053.001.08 message (BkToCstmrStmt)"},
		{name: "truncated", cut: strings.Index(good, "<Amt Ccy=\"INR\">25.00</Amt>\n<Rltd"), opts: coll, line: 14, elem: "TxDtls",
			msg: "unexpected EOF"},
		{name: "mismatched end tag", old: "</NtryDtls>", new: "</NtryDetails>", opts: coll, line: 17, elem: "Ntry/NtryDtls",
			msg: "element <NtryDtls> closed by </NtryDetails>"},
		{name: "batch sum is not the entry's Amt", old: "</TxDtls>", new: secondTx, opts: coll, line: 6, elem: "Ntry",
			msg: "entry 1: its 2 transactions sum to 35.00, its Amt is 25.00"},
		{name: "batch transaction without amount", base: twoTx, old: "<Amt Ccy=\"INR\">25.00</Amt>\n<RltdPties>", new: "<RltdPties>", opts: coll, line: 12, elem: "TxDtls/Amt",
			msg: "entry 1 has several transactions: each needs its Amt or AmtDtls/TxAmt/Amt"},
		{name: "transaction in another currency", old: "<Amt Ccy=\"INR\">25.00</Amt>\n<RltdPties>", new: "<Amt Ccy=\"USD\">25.00</Amt>\n<RltdPties>", opts: coll, line: 14, elem: "TxDtls/Amt",
			msg: "currency USD is not the entry's (INR)"},
		{name: "no debtor account", old: "<RltdPties><DbtrAcct><Id><Othr><Id>0001</Id></Othr></Id></DbtrAcct></RltdPties>", new: "", opts: coll, line: 12, elem: "TxDtls/RltdPties/DbtrAcct",
			msg: "missing: the customer's account of chg-1"},
		{name: "bad CdtDbtInd", old: "CRDT", new: "CR", opts: coll, line: 8, elem: "Ntry/CdtDbtInd", msg: `"CR" is neither CRDT nor DBIT`},
		{name: "bad RvslInd", old: "<CdtDbtInd>CRDT</CdtDbtInd>", new: "<CdtDbtInd>CRDT</CdtDbtInd><RvslInd>yes</RvslInd>", opts: coll, line: 8, elem: "Ntry/RvslInd", msg: `"yes" is not true or false`},
		{name: "no status", old: "<Sts><Cd>BOOK</Cd></Sts>", new: "", opts: coll, line: 11, elem: "Ntry/Sts", msg: "missing in entry 1"},
		{name: "booked without a booking date", old: "<BookgDt><Dt>2026-12-01</Dt></BookgDt>", new: "", opts: coll, line: 11, elem: "Ntry/BookgDt", msg: "missing in booked entry 1"},
		{name: "bad booking date", old: "2026-12-01", new: "01/12/2026", opts: coll, line: 10, elem: "Ntry/BookgDt/Dt", msg: `"01/12/2026" is not an ISO date (YYYY-MM-DD)`},
		{name: "zero amount", old: `<Amt Ccy="INR">25.00</Amt>
<RltdPties>`, new: `<Amt Ccy="INR">0.00</Amt>
<RltdPties>`, opts: coll, line: 14, elem: "TxDtls/Amt", msg: "zero amount"},
		{name: "entry before the account", old: "<Acct><Id><IBAN>GB33BUKB20201555555555</IBAN></Id></Acct>\n", new: "", line: 5, elem: "Stmt/Acct",
			msg: "missing before the first Ntry"},
		{name: "not XML nor CSV", old: good, new: "hello", line: 1, msg: "neither a camt.053/camt.054 XML document nor the CSV export (header " + csvHeader + ")"},
		{name: "not a Document", old: "Document", new: "Doc", line: 2, elem: "Doc", msg: "the root element is not an ISO 20022 Document"},
		{name: "period ends before it starts", old: "<Acct>", new: "<FrToDt><FrDtTm>2026-12-02T00:00:00Z</FrDtTm><ToDtTm>2026-12-01T00:00:00Z</ToDtTm></FrToDt><Acct>", line: 5, elem: "Stmt/FrToDt",
			msg: "ends (2026-12-01T00:00:01Z) before it starts (2026-12-02T00:00:00Z)"},
		{name: "unsupported encoding", old: `encoding="UTF-8"`, new: `encoding="EBCDIC"`, line: 1,
			msg: `xml: opening charset "EBCDIC": encoding "EBCDIC" is not read (UTF-8, ISO-8859-1 or US-ASCII)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := good
			if tt.base != "" {
				doc = tt.base
			}
			if tt.old != "" {
				if !strings.Contains(doc, tt.old) {
					t.Fatalf("%q is not in the document", tt.old)
				}
				doc = strings.Replace(doc, tt.old, tt.new, 1)
			}
			if tt.cut > 0 {
				doc = doc[:tt.cut]
			}
			path := filepath.Join(t.TempDir(), "bad.xml")
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ReadFile(path, tt.opts, func(Posting) error { return nil })
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T), want a *FormatError", err, err)
			}
			if fe.File != path || fe.Line != tt.line || fe.Elem != tt.elem || fe.Err == nil || fe.Err.Error() != tt.msg {
				t.Errorf("got  %s:%d: %s: %v\nwant %s:%d: %s: %s", fe.File, fe.Line, fe.Elem, fe.Err, path, tt.line, tt.elem, tt.msg)
			}
		})
	}
}

func TestFormatErrorText(t *testing.T) {
	doc := strings.Replace(good, `<Amt Ccy="INR">25.00</Amt>`, `<Amt Ccy="INR">25,00</Amt>`, 1)
	_, err := Read(strings.NewReader(doc), "stmt.xml", Options{CollectionAccount: "GB33BUKB20201555555555"}, func(Posting) error { return nil })
	if want := `stmt.xml:7: Ntry/Amt: "25,00" is not a decimal amount`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

func TestCollectionAccountNotInTheFile(t *testing.T) {
	path := filepath.Join("testdata", "camt053_001_02_collection.xml")
	_, posts, err := readAll(t, path, Options{CollectionAccount: "GB29NWBK60161331926819"})
	var ae *AccountNotFoundError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v, want an *AccountNotFoundError", err)
	}
	want := path + ": no statement of collection account GB29NWBK60161331926819 in the file (accounts found: ******************5555, ******************3000)"
	if err.Error() != want {
		t.Errorf("error\n %s\nwant\n %s", err, want)
	}
	if want := []string{"******************5555", "******************3000"}; !slices.Equal(ae.Found, want) {
		t.Errorf("Found %q, want %q (masked)", ae.Found, want)
	}
	if len(posts) != 0 {
		t.Errorf("postings %v", posts)
	}
}

func TestCallbackErrorIsReturnedAsIs(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	h, err := ReadFile(filepath.Join("testdata", "camt054_001_08_customer.xml"), Options{}, func(Posting) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if err != stop {
		t.Fatalf("error %v, want the callback's own", err)
	}
	if n != 2 || h.Postings != 2 {
		t.Errorf("called %d times, header %+v", n, h)
	}
}

// A batch larger than what is held is handed over as it is read; its sum
// is checked after.
func TestLargeBatch(t *testing.T) {
	for _, tt := range []struct {
		name   string
		total  string
		wantOK bool
	}{{"sum right", "1500.00", true}, {"sum wrong", "1499.00", false}} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			b.WriteString(`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.08"><BkToCstmrDbtCdtNtfctn><Ntfctn><Acct><Id><Othr><Id>A</Id></Othr></Id></Acct>
<Ntry><Amt Ccy="INR">` + tt.total + `</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>2026-12-01</Dt></BookgDt><NtryDtls>
`)
			for i := range 1500 {
				b.WriteString(`<TxDtls><Refs><EndToEndId>chg-` + strings.Repeat("x", i%3) + `</EndToEndId></Refs><Amt Ccy="INR">1.00</Amt></TxDtls>
`)
			}
			b.WriteString("</NtryDtls></Ntry></Ntfctn></BkToCstmrDbtCdtNtfctn></Document>\n")
			n := 0
			h, err := Read(strings.NewReader(b.String()), "big.xml", Options{}, func(p Posting) error {
				n++
				return nil
			})
			if n != 1500 || h.Postings != 1500 {
				t.Errorf("%d postings handed over, header %+v", n, h)
			}
			var fe *FormatError
			switch {
			case tt.wantOK && err != nil:
				t.Fatal(err)
			case !tt.wantOK && (!errors.As(err, &fe) || fe.Line != 2 || fe.Elem != "Ntry"):
				t.Fatalf("error %v, want a *FormatError at line 2, Ntry", err)
			}
		})
	}
}

func TestReadCSVMalformed(t *testing.T) {
	const head = "booking_date,bank_key,account,amount_minor,currency,reference,reversal,narrative\n"
	const ok = "2026-12-01,chg-1,0001,2500,INR,R1,false,N\n"
	tests := []struct {
		name, text string
		line       int
		elem, msg  string
	}{
		{"bad header", "booking_date,key,account,amount_minor,currency,reference,reversal\n" + ok, 1, "header",
			`"booking_date,key,account,amount_minor,currency,reference,reversal" is not "` + csvHeader + `" (with or without a last column narrative, or narrative,return_reason)`},
		{"decimal amount", head + ok + "2026-12-01,chg-2,0001,25.00,INR,R2,false,N\n", 3, "amount_minor", `"25.00" is not a positive integer of minor units`},
		{"negative amount", head + ok + "2026-12-01,chg-2,0001,-5,INR,R2,false,N\n", 3, "amount_minor", `"-5" is not a positive integer of minor units`},
		{"signed amount", head + "2026-12-01,chg-2,0001,+5,INR,R2,false,N\n", 2, "amount_minor", `"+5" is not a positive integer of minor units`},
		{"zero amount", head + "2026-12-01,chg-2,0001,0,INR,R2,false,N\n", 2, "amount_minor", `"0" is not a positive integer of minor units`},
		{"overflow", head + "2026-12-01,chg-2,0001,9223372036854775808,INR,R2,false,N\n", 2, "amount_minor", `"9223372036854775808" is not a positive integer of minor units`},
		{"bad date", head + ok + ok + "2026-13-01,chg-2,0001,25,INR,R2,false,N\n", 4, "booking_date", `"2026-13-01" is not a date (YYYY-MM-DD)`},
		{"bad currency", head + "2026-12-01,chg-2,0001,25,inr,R2,false,N\n", 2, "currency", `"inr" is not an ISO-4217 currency code`},
		{"bad reversal", head + "2026-12-01,chg-2,0001,25,INR,R2,yes,N\n", 2, "reversal", `"yes" is not true, false or empty`},
		{"no bank key", head + "2026-12-01,,0001,25,INR,R2,false,N\n", 2, "bank_key", "empty"},
		{"no account", head + "2026-12-01,chg-2,,25,INR,R2,false,N\n", 2, "account", "empty"},
		{"wrong field count", head + ok + "2026-12-01,chg-2,0001,25,INR,R2,false\n", 3, "column 1", "wrong number of fields"},
		{"bad quote", head + "2026-12-01,chg-2,0001,25,INR,R2,false,\"N\"x\n", 2, "column 41", `extraneous or missing " in quoted-field`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "debits.csv")
			if err := os.WriteFile(path, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ReadFile(path, Options{}, func(Posting) error { return nil })
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a *FormatError", err)
			}
			if fe.Line != tt.line || fe.Elem != tt.elem || fe.Err.Error() != tt.msg {
				t.Errorf("got  %d: %s: %v\nwant %d: %s: %s", fe.Line, fe.Elem, fe.Err, tt.line, tt.elem, tt.msg)
			}
		})
	}
}

func TestReadLatin1(t *testing.T) {
	doc := strings.Replace(good, `encoding="UTF-8"`, `encoding="ISO-8859-1"`, 1)
	doc = strings.Replace(doc, "</Refs>", "</Refs><RmtInf><Ustrd>FRAIS \xe9T\xe9</Ustrd></RmtInf>", 1)
	var got []Posting
	if _, err := Read(strings.NewReader(doc), "l1.xml", Options{CollectionAccount: "GB33BUKB20201555555555"}, func(p Posting) error {
		got = append(got, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Narrative != "FRAIS éTé" {
		t.Errorf("postings %+v", got)
	}
}

// A return on the collection account (a DBIT entry with RtrInf, no
// RvslInd) is read as a reversal with its reason code (Rsn/Prtry here),
// its parties optional; the other transaction of its entry, and a DBIT
// entry without RtrInf, are not ours.
func TestReadReturns(t *testing.T) {
	doc := `<?xml version="1.0"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.04"><BkToCstmrDbtCdtNtfctn><Ntfctn>
<Acct><Id><Othr><Id>FEES-001</Id></Othr></Id></Acct>
<Ntry><Amt Ccy="INR">40.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts>BOOK</Sts><BookgDt><Dt>2026-12-02</Dt></BookgDt><AcctSvcrRef>E-1</AcctSvcrRef>
<NtryDtls>
<TxDtls><Refs><EndToEndId>CHG-1</EndToEndId></Refs><Amt Ccy="INR">25.00</Amt><RtrInf><Rsn><Prtry>BANK-77</Prtry></Rsn></RtrInf></TxDtls>
<TxDtls><Refs><EndToEndId>OTHER-9</EndToEndId></Refs><Amt Ccy="INR">15.00</Amt></TxDtls>
</NtryDtls></Ntry>
<Ntry><Amt Ccy="INR">5.00</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts>BOOK</Sts><BookgDt><Dt>2026-12-02</Dt></BookgDt>
<NtryDtls><TxDtls><Refs><EndToEndId>CHG-2</EndToEndId></Refs></TxDtls></NtryDtls></Ntry>
</Ntfctn></BkToCstmrDbtCdtNtfctn></Document>`
	var got []Posting
	h, err := Read(strings.NewReader(doc), "n.xml", Options{CollectionAccount: "FEES-001"}, func(p Posting) error {
		got = append(got, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || h.Postings != 1 {
		t.Fatalf("postings %+v", got)
	}
	p := got[0]
	if p.BankKey != "CHG-1" || !p.Reversal || !p.Return || p.ReturnReason != "BANK-77" || p.Amount.Minor != 2500 || p.Reference != "E-1" || p.Account != "" {
		t.Fatalf("return read as %+v", p)
	}
	if s := ReturnReasonText("AM04"); s != "AM04 (insufficient funds)" {
		t.Fatal(s)
	}
}

// The CSV export's optional ninth column names a return's reason code.
func TestReadCSVReturnReason(t *testing.T) {
	doc := "booking_date,bank_key,account,amount_minor,currency,reference,reversal,narrative,return_reason\n" +
		"2026-12-01,CHG-1,001234567891,2500,INR,CBS1,false,SMS_ALERT_FEE 2026-12-01,\n" +
		"2026-12-02,CHG-1,001234567891,2500,INR,RTN-1,true,,AC04\n"
	var got []Posting
	if _, err := Read(strings.NewReader(doc), "s.csv", Options{}, func(p Posting) error { got = append(got, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Return || !got[1].Return || !got[1].Reversal || got[1].ReturnReason != "AC04" {
		t.Fatalf("%+v", got)
	}
	bad := strings.Replace(doc, "RTN-1,true", "RTN-1,false", 1)
	var fe *FormatError
	if _, err := Read(strings.NewReader(bad), "s.csv", Options{}, func(Posting) error { return nil }); !errors.As(err, &fe) || fe.Elem != "return_reason" {
		t.Fatalf("a reason code on a posting: %v", err)
	}
}

// Returns told by their bank transaction code (no RtrInf), and stornos
// without a bank key, as the reader hands them over: read from the golden
// statements written by hand from the standard (reconcile/testdata).
func TestReadReturnsByCodeAndUnkeyedReversals(t *testing.T) {
	type got struct {
		key, ref, reason string
		minor            int64
		reversal, ret    bool
	}
	for _, tc := range []struct {
		name    string
		file    string
		unkeyed bool
		want    []got
		skipped int // Header.Unkeyed
	}{
		{"a return by PMNT/IDDT/UPDD, its code from the narrative", "camt053_001_08_return_bktxcd_narrative.xml", false, []got{
			{"CHG-R-11", "REF-CHG-R-11", "", 2500, false, false},
			{"CHG-R-12", "REF-CHG-R-12", "", 2500, false, false},
			{"CHG-R-12", "RTN-000777", "AC04", 2500, true, true},
		}, 0},
		{"stornos without a key, not asked for: counted and skipped", "camt053_001_08_storno_notprovided.xml", false, []got{
			{"CHG-R-13", "REF-CHG-R-13", "", 2500, false, false},
		}, 2},
		{"stornos without a key, asked for", "camt053_001_08_storno_notprovided.xml", true, []got{
			{"CHG-R-13", "REF-CHG-R-13", "", 2500, false, false},
			{"", "REF-CHG-R-13", "", 2500, true, false},
			{"", "REF-CHG-R-99", "", 3000, true, false},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []got
			h, err := ReadFile(filepath.Join("..", "testdata", tc.file), Options{CollectionAccount: "FEES-001", UnkeyedReversals: tc.unkeyed}, func(p Posting) error {
				ps = append(ps, got{p.BankKey, p.Reference, p.ReturnReason, p.Amount.Minor, p.Reversal, p.Return})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ps, tc.want) || h.Unkeyed != tc.skipped {
				t.Fatalf("postings %+v, %d unkeyed; want %+v, %d", ps, h.Unkeyed, tc.want, tc.skipped)
			}
		})
	}
}

// A transaction's own bank transaction code says what it is; one without
// takes its entry's. Written from the standard's element names.
func TestReadReturnCodeOfTheTransactionFirst(t *testing.T) {
	tx := func(e2e, code string) string {
		bk := ""
		if code != "" {
			bk = `<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>IDDT</Cd><SubFmlyCd>` + code + `</SubFmlyCd></Fmly></Domn></BkTxCd>`
		}
		return `<TxDtls><Refs><AcctSvcrRef>R-` + e2e + `</AcctSvcrRef><EndToEndId>` + e2e + `</EndToEndId></Refs><Amt Ccy="INR">25.00</Amt>` + bk + `</TxDtls>`
	}
	doc := func(entryCode string, txs ...string) string {
		return `<?xml version="1.0"?><Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"><BkToCstmrStmt><GrpHdr><MsgId>M</MsgId><CreDtTm>2026-12-02T01:00:00Z</CreDtTm></GrpHdr>` +
			`<Stmt><Id>S</Id><CreDtTm>2026-12-02T01:00:00Z</CreDtTm><Acct><Id><Othr><Id>FEES-001</Id></Othr></Id></Acct>` +
			`<Ntry><Amt Ccy="INR">` + []string{"", "25.00", "50.00"}[len(txs)] + `</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>2026-12-01</Dt></BookgDt>` +
			`<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>IDDT</Cd><SubFmlyCd>` + entryCode + `</SubFmlyCd></Fmly></Domn></BkTxCd>` +
			`<NtryDtls>` + strings.Join(txs, "") + `</NtryDtls><AddtlNtryInf>UNPAID AM04</AddtlNtryInf></Ntry></Stmt></BkToCstmrStmt></Document>`
	}
	for _, tc := range []struct {
		name string
		doc  string
		want []string // the bank keys read as returns
	}{
		{"the entry's code", doc("UPDD", tx("CHG-1", "")), []string{"CHG-1"}},
		{"a transaction's code of another kind wins", doc("UPDD", tx("CHG-1", ""), tx("CHG-2", "ESDD")), []string{"CHG-1"}},
		{"a transaction's return code under an entry of another kind", doc("ESDD", tx("CHG-1", "UPDD")), []string{"CHG-1"}},
		{"no return code", doc("ESDD", tx("CHG-1", "")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			_, err := Read(strings.NewReader(tc.doc), "stmt.xml", Options{CollectionAccount: "FEES-001"}, func(p Posting) error {
				if !p.Return || !p.Reversal || p.Amount.Minor != 2500 {
					t.Errorf("posting %+v: want a return of 25.00", p)
				}
				if p.ReturnReason != "AM04" {
					t.Errorf("reason %q, want AM04 from the entry's narrative", p.ReturnReason)
				}
				got = append(got, p.BankKey)
				return nil
			})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("returns %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}

// A FrToDt written without an offset is the bank's wall-clock time:
// Options.Location says where; nil is UTC. A time with an offset keeps
// its own. BookingDate is the day as written, whatever the zone.
func TestNaiveFrToDtInLocation(t *testing.T) {
	ist, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skip("no zone database:", err)
	}
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := WriteCamt053(&buf, StatementInfo{ID: "STMT-TZ", Account: "FEES-001", Created: day,
		Period: Period{From: day, To: day.AddDate(0, 0, 1)}},
		[]Posting{{BankKey: "CHG-TZ-1", Account: "0012345678901", Amount: charge.Money{Minor: 2500, Currency: "INR"}, BookingDate: day, Reference: "R1"}}); err != nil {
		t.Fatal(err)
	}
	zulu := buf.String()
	naive := strings.NewReplacer("Z</FrDtTm>", "</FrDtTm>", "Z</ToDtTm>", "</ToDtTm>").Replace(zulu)
	if naive == zulu {
		t.Fatal("the written FrToDt has no Z to take off")
	}
	dates := strings.NewReplacer("<FrDtTm>2026-11-20T00:00:00Z</FrDtTm>", "<FrDt>2026-11-20</FrDt>",
		"<ToDtTm>2026-11-20T23:59:59Z</ToDtTm>", "<ToDt>2026-11-20</ToDt>").Replace(zulu)
	if dates == zulu {
		t.Fatal("the written FrToDt is not the one expected")
	}
	istPeriod := Period{From: time.Date(2026, 11, 19, 18, 30, 0, 0, time.UTC), To: time.Date(2026, 11, 20, 18, 30, 0, 0, time.UTC)}
	utcPeriod := Period{From: day, To: day.AddDate(0, 0, 1)}
	for _, c := range []struct {
		name, doc string
		loc       *time.Location
		want      Period
	}{
		{"naive, IST", naive, ist, istPeriod},
		{"naive, nil (UTC)", naive, nil, utcPeriod},
		{"naive, UTC", naive, time.UTC, utcPeriod},
		{"dates, IST", dates, ist, istPeriod},
		{"dates, nil (UTC)", dates, nil, utcPeriod},
		{"Z, IST (its own offset)", zulu, ist, utcPeriod},
	} {
		var posts []Posting
		h, err := Read(strings.NewReader(c.doc), "stmt.xml", Options{CollectionAccount: "FEES-001", Location: c.loc}, func(p Posting) error {
			posts = append(posts, p)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !h.Period.From.Equal(c.want.From) || !h.Period.To.Equal(c.want.To) {
			t.Errorf("%s: period [%s, %s), want [%s, %s)", c.name, h.Period.From, h.Period.To, c.want.From, c.want.To)
		}
		if h.Period.From.Location() != time.UTC || h.Period.To.Location() != time.UTC {
			t.Errorf("%s: period not in UTC: %v", c.name, h.Period)
		}
		if len(posts) != 1 || !posts[0].BookingDate.Equal(day) {
			t.Errorf("%s: postings %+v, want one booked %s (the day as written)", c.name, posts, day)
		}
	}
}

func TestParseAmount(t *testing.T) {
	tests := []struct {
		text  string
		cur   charge.Currency
		minor int64
		err   string
	}{
		{"25", "INR", 2500, ""},
		{"25.5", "INR", 2550, ""},
		{"25.00", "INR", 2500, ""},
		{"0025.00", "INR", 2500, ""},
		{"25.", "INR", 2500, ""},
		{".5", "INR", 50, ""},
		{"0", "INR", 0, ""},
		{"1234567.891", "BHD", 1234567891, ""},
		{"1.5", "BHD", 1500, ""},
		{"500", "JPY", 500, ""},
		{"92233720368547758.07", "USD", 9223372036854775807, ""},
		{"9223372036854775807", "JPY", 9223372036854775807, ""},
		{"", "INR", 0, "empty amount"},
		{"-25.00", "INR", 0, `"-25.00" is negative`},
		{"+25.00", "INR", 0, `"+25.00" has a sign`},
		{"2.5e1", "INR", 0, `"2.5e1" has an exponent`},
		{"25E0", "INR", 0, `"25E0" has an exponent`},
		{"25.001", "INR", 0, `"25.001" has 3 decimals, INR has 2`},
		{"25.000", "INR", 0, `"25.000" has 3 decimals, INR has 2`},
		{"25.0", "JPY", 0, `"25.0" has 1 decimals, JPY has 0`},
		{"25.00", "XYZ", 0, `"XYZ" is not a known ISO-4217 currency`},
		{"25.00", "", 0, `"" is not a known ISO-4217 currency`},
		{"2 500", "INR", 0, `"2 500" holds a space`},
		{" 25", "INR", 0, `" 25" holds a space`},
		{"25,00", "INR", 0, `"25,00" is not a decimal amount`},
		{"1.2.3", "INR", 0, `"1.2.3" is not a decimal amount`},
		{".", "INR", 0, `"." is not a decimal amount`},
		{"0x10", "INR", 0, `"0x10" is not a decimal amount`},
		{"NaN", "INR", 0, `"NaN" is not a decimal amount`},
		{"٣", "INR", 0, `"٣" is not a decimal amount`},
		{"92233720368547758.08", "USD", 0, `"92233720368547758.08" is too large`},
		{"92233720368547758.1", "USD", 0, `"92233720368547758.1" is too large`},
		{"9223372036854775808", "JPY", 0, `"9223372036854775808" is too large`},
		{"99999999999999999999999", "INR", 0, `"99999999999999999999999" is too large`},
	}
	for _, tt := range tests {
		t.Run(tt.text+"/"+string(tt.cur), func(t *testing.T) {
			m, err := ParseAmount(tt.text, tt.cur)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("ParseAmount(%q, %s) = %v, %v; want error %s", tt.text, tt.cur, m, err, tt.err)
				}
				return
			}
			if err != nil || m != (charge.Money{Minor: tt.minor, Currency: tt.cur}) {
				t.Fatalf("ParseAmount(%q, %s) = %v, %v; want %d", tt.text, tt.cur, m, err, tt.minor)
			}
		})
	}
}

func TestFormatAmount(t *testing.T) {
	tests := []struct {
		m    charge.Money
		want string
	}{
		{charge.Money{Minor: 2500, Currency: "INR"}, "25.00"},
		{charge.Money{Minor: 5, Currency: "INR"}, "0.05"},
		{charge.Money{Minor: 0, Currency: "INR"}, "0.00"},
		{charge.Money{Minor: -2550, Currency: "INR"}, "-25.50"},
		{charge.Money{Minor: -5, Currency: "INR"}, "-0.05"},
		{charge.Money{Minor: 500, Currency: "JPY"}, "500"},
		{charge.Money{Minor: 1500, Currency: "BHD"}, "1.500"},
		{charge.Money{Minor: 7, Currency: "BHD"}, "0.007"},
		{charge.Money{Minor: 9223372036854775807, Currency: "USD"}, "92233720368547758.07"},
		{charge.Money{Minor: -9223372036854775808, Currency: "USD"}, "-92233720368547758.08"},
		{charge.Money{Minor: 2500, Currency: "XYZ"}, "2500"},
	}
	for _, tt := range tests {
		if got := FormatAmount(tt.m); got != tt.want {
			t.Errorf("FormatAmount(%v) = %q, want %q", tt.m, got, tt.want)
		}
		if tt.m.Minor >= 0 && tt.m.Currency.Valid() {
			back, err := ParseAmount(FormatAmount(tt.m), tt.m.Currency)
			if err != nil || back != tt.m {
				t.Errorf("ParseAmount(FormatAmount(%v)) = %v, %v", tt.m, back, err)
			}
		}
	}
}

func samplePostings() []Posting {
	return []Posting{
		{BankKey: "chg-1", Account: "DE89370400440532013000", Amount: money(2500, "INR"), BookingDate: day("2026-12-01"), Reference: "R1", Narrative: "SMS_ALERT_FEE 2026-12-01"},
		{BankKey: "chg-2~2", Account: "001234567890", Amount: money(1, "INR"), BookingDate: day("2026-12-01"), Reference: "R2", Narrative: `CHEQUE_BOOK_FEE <&> "2026-12-01"`},
		{BankKey: "chg-3", Account: "ACC 7", Amount: money(1500, "BHD"), BookingDate: day("2026-12-02")},
		{BankKey: "chg-4", Account: "0009", Amount: money(500, "JPY"), BookingDate: day("2026-12-02"), Reference: "R4"},
		{BankKey: "chg-1", Account: "DE89370400440532013000", Amount: money(2500, "INR"), Reversal: true, BookingDate: day("2026-12-03"), Reference: "R5", Narrative: "REVERSAL"},
	}
}

func TestWriteCamt053RoundTrip(t *testing.T) {
	want := samplePostings()
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, version := range []string{"", "camt.053.001.02", "camt.053.001.08", "camt.053.001.13"} {
		for _, acct := range []string{"GB33BUKB20201555555555", "FEE-COLLECTION-1"} {
			t.Run(version+"/"+acct, func(t *testing.T) {
				var buf bytes.Buffer
				s := StatementInfo{ID: "S-1", Account: acct, Period: Period{From: from, To: from.AddDate(0, 0, 3)}, Created: from.AddDate(0, 0, 3), Version: version}
				if err := WriteCamt053(&buf, s, want); err != nil {
					t.Fatal(err)
				}
				doc := buf.String()
				wantVersion := version
				if version == "" {
					wantVersion = "camt.053.001.08"
				}
				if strings.Contains(doc, "<Sts>BOOK</Sts>") != (wantVersion == "camt.053.001.02") {
					t.Errorf("status shape of %s:\n%s", wantVersion, doc)
				}
				var got []Posting
				h, err := Read(&buf, "out.xml", Options{CollectionAccount: acct}, func(p Posting) error {
					p.Where = ""
					got = append(got, p)
					return nil
				})
				if err != nil {
					t.Fatalf("%v\n%s", err, doc)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
				}
				if h.Format != wantVersion || h.Entries != len(want) || h.Postings != len(want) ||
					!h.Period.From.Equal(s.Period.From) || !h.Period.To.Equal(s.Period.To) {
					t.Errorf("header %+v", h)
				}
			})
		}
	}
}

func TestWriteCSVRoundTrip(t *testing.T) {
	want := samplePostings()
	var buf bytes.Buffer
	if err := WriteCSV(&buf, slices.Values(want)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), csvHeader+",narrative\n") {
		t.Errorf("header: %q", buf.String())
	}
	var got []Posting
	if _, err := Read(&buf, "out.csv", Options{}, func(p Posting) error {
		p.Where = ""
		got = append(got, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestWriteRefuses(t *testing.T) {
	good := samplePostings()[0]
	bad := map[string]func(p *Posting){
		"no bank key":     func(p *Posting) { p.BankKey = "" },
		"no account":      func(p *Posting) { p.Account = "" },
		"zero amount":     func(p *Posting) { p.Amount.Minor = 0 },
		"negative":        func(p *Posting) { p.Amount.Minor = -1 },
		"unknown ccy":     func(p *Posting) { p.Amount.Currency = "XYZ" },
		"no booking date": func(p *Posting) { p.BookingDate = time.Time{} },
	}
	for name, spoil := range bad {
		p := good
		spoil(&p)
		if err := WriteCamt053(&bytes.Buffer{}, StatementInfo{Account: "A"}, []Posting{good, p}); err == nil || !strings.HasPrefix(err.Error(), "posting 2: ") {
			t.Errorf("%s: camt.053: %v", name, err)
		}
		if err := WriteCSV(&bytes.Buffer{}, slices.Values([]Posting{p})); err == nil {
			t.Errorf("%s: CSV written", name)
		}
	}
	for _, v := range []string{"camt.054.001.08", "camt.053.001.01", "camt.053.001.14", "camt.053.001.8"} {
		if err := WriteCamt053(&bytes.Buffer{}, StatementInfo{Account: "A", Version: v}, nil); err == nil {
			t.Errorf("version %s written", v)
		}
	}
	if err := WriteCamt053(&bytes.Buffer{}, StatementInfo{}, nil); err == nil {
		t.Error("written without an account")
	}
}

func TestLooksLikeIBAN(t *testing.T) {
	for s, want := range map[string]bool{
		"GB33BUKB20201555555555":      true,
		"GB33 BUKB 2020 1555 5555 55": true,
		"gb33bukb20201555555555":      true,
		"DE89370400440532013000":      true,
		"FR1420041010050500013M02606": true,
		"GB34BUKB20201555555555":      false, // check digits
		"001234567890":                false,
		"FEE-COLLECTION-1":            false,
		"GB33":                        false,
	} {
		if LooksLikeIBAN(s) != want {
			t.Errorf("LooksLikeIBAN(%q) = %v", s, !want)
		}
	}
}
