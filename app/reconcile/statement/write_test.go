package statement

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

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
