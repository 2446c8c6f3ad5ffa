package statement

import (
	"encoding/xml"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StatementInfo is what WriteCamt053 says of the statement around its
// entries.
type StatementInfo struct {
	// ID is the statement's Id (and its group header's MsgId).
	ID string
	// Account is the collection account, written as Id/IBAN when it
	// looks like one (LooksLikeIBAN), else as Id/Othr/Id.
	Account string
	// Period, when not zero, is written as FrToDt: FrDtTm = From, ToDtTm
	// = To less one second (inclusive), in UTC. Read back, a period of
	// whole seconds is the same.
	Period Period
	// Created is CreDtTm (UTC, to the second); zero: now.
	Created time.Time
	// Version is the message, "camt.053.001.02" to "camt.053.001.13";
	// empty: "camt.053.001.08".
	Version string
}

// WriteCamt053 writes postings as a camt.053 statement of the collection
// account (see WriteCamt053Seq).
func WriteCamt053(w io.Writer, s StatementInfo, postings []Posting) error {
	return WriteCamt053Seq(w, s, slices.Values(postings))
}

// WriteCamt053Seq writes a camt.053 statement of the collection account
// s.Account with one booked entry per posting, as it comes from seq: a
// credit (CRDT), or for a reversal a debit (DBIT) with RvslInd true, of
// one transaction whose EndToEndId is the bank key, AcctSvcrRef (entry's
// and transaction's) the Reference, RmtInf/Ustrd the Narrative,
// RltdPties/DbtrAcct the customer's account (Id/IBAN when it looks like
// one, else Id/Othr/Id), AmtDtls/TxAmt/Amt and the entry's Amt the amount
// (FormatAmount), BookgDt/Dt the booking date. Sts is <Sts>BOOK</Sts>
// before .001.08 and <Sts><Cd>BOOK</Cd></Sts> from .001.08 on.
//
// Balances (Bal) are not written: the simulator's ledger has none to give,
// so a strict schema validation would refuse the file; Read does not need
// them. A posting without a bank key, account or booking date, or whose
// amount is not positive, stops the writing with an error.
func WriteCamt053Seq(w io.Writer, s StatementInfo, seq iter.Seq[Posting]) error {
	version := s.Version
	if version == "" {
		version = "camt.053.001.08"
	}
	_, _, _, err := message(camtNamespace + version)
	if err != nil || !strings.HasPrefix(version, "camt.053.") {
		return fmt.Errorf("version %q: not camt.053.001.02 to camt.053.001.13", version)
	}
	if strings.TrimSpace(s.Account) == "" {
		return fmt.Errorf("no collection account")
	}
	n, _ := strconv.Atoi(version[len(version)-2:])
	newStatus := n >= 8
	created := s.Created
	if created.IsZero() {
		created = time.Now()
	}
	created = created.UTC().Truncate(time.Second)
	const dt = "2006-01-02T15:04:05Z"

	enc := xml.NewEncoder(w)
	enc.Indent("", " ")
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	doc := xml.StartElement{Name: xml.Name{Local: "Document"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: camtNamespace + version}}}
	body := xml.StartElement{Name: xml.Name{Local: "BkToCstmrStmt"}}
	stmt := xml.StartElement{Name: xml.Name{Local: "Stmt"}}
	for _, t := range []xml.StartElement{doc, body} {
		if err := enc.EncodeToken(t); err != nil {
			return err
		}
	}
	if err := enc.Encode(xGrpHdr{MsgID: s.ID, CreDtTm: created.Format(dt)}); err != nil {
		return err
	}
	if err := enc.EncodeToken(stmt); err != nil {
		return err
	}
	type field struct {
		name string
		v    any
	}
	fields := []field{{"Id", s.ID}, {"CreDtTm", created.Format(dt)}}
	if !s.Period.From.IsZero() || !s.Period.To.IsZero() {
		fields = append(fields, field{"FrToDt", xFrToDt{FrDtTm: s.Period.From.UTC().Format(dt), ToDtTm: s.Period.To.UTC().Add(-time.Second).Format(dt)}})
	}
	fields = append(fields, field{"Acct", xAcct(s.Account)})
	for _, f := range fields {
		if err := enc.EncodeElement(f.v, xml.StartElement{Name: xml.Name{Local: f.name}}); err != nil {
			return err
		}
	}
	i := 0
	for p := range seq {
		i++
		if err := checkPosting(p); err != nil {
			return fmt.Errorf("posting %d: %w", i, err)
		}
		e := xNtry{
			Amt:       xAmt{Ccy: string(p.Amount.Currency), Value: FormatAmount(p.Amount)},
			CdtDbtInd: "CRDT",
			BookgDt:   xDate{Dt: p.BookingDate.Format(time.DateOnly)},
			Ref:       p.Reference,
			BkTxCd:    xBkTxCd{Prtry: xPrtry{Cd: "FEE"}},
		}
		if p.Reversal {
			e.CdtDbtInd, e.RvslInd = "DBIT", "true"
		}
		if newStatus {
			e.Sts.Cd = "BOOK"
		} else {
			e.Sts.Text = "BOOK"
		}
		tx := &e.NtryDtls.TxDtls
		tx.Refs = xRefs{AcctSvcrRef: p.Reference, EndToEndID: p.BankKey}
		tx.AmtDtls.TxAmt.Amt = e.Amt
		tx.RltdPties.DbtrAcct = xAcct(p.Account)
		if p.Narrative != "" {
			tx.RmtInf = &xRmtInf{Ustrd: p.Narrative}
		}
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	for _, name := range []xml.Name{stmt.Name, body.Name, doc.Name} {
		if err := enc.EncodeToken(xml.EndElement{Name: name}); err != nil {
			return err
		}
	}
	if err := enc.Flush(); err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n")
	return err
}

// LooksLikeIBAN reports whether s (spaces ignored) is an IBAN: two
// letters, two check digits, up to 30 letters and digits, 15 to 34 in all,
// passing the ISO 13616 mod-97 check.
func LooksLikeIBAN(s string) bool {
	s = normIBAN(s)
	if len(s) < 15 || len(s) > 34 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter, digit := c >= 'A' && c <= 'Z', c >= '0' && c <= '9'
		if i < 2 && !letter || i >= 2 && i < 4 && !digit || !letter && !digit {
			return false
		}
	}
	rem := 0
	for _, c := range s[4:] + s[:4] {
		if c >= 'A' {
			rem = (rem*100 + int(c-'A'+10)) % 97
		} else {
			rem = (rem*10 + int(c-'0')) % 97
		}
	}
	return rem == 1
}

func xAcct(a string) xAccount {
	a = strings.TrimSpace(a)
	if LooksLikeIBAN(a) {
		return xAccount{ID: xAcctID{IBAN: a}}
	}
	return xAccount{ID: xAcctID{Othr: &xOthr{ID: a}}}
}

type xGrpHdr struct {
	XMLName xml.Name `xml:"GrpHdr"`
	MsgID   string   `xml:"MsgId"`
	CreDtTm string   `xml:"CreDtTm"`
}

type xFrToDt struct {
	FrDtTm string `xml:"FrDtTm"`
	ToDtTm string `xml:"ToDtTm"`
}

type xAccount struct {
	ID xAcctID `xml:"Id"`
}

type xAcctID struct {
	IBAN string `xml:"IBAN,omitempty"`
	Othr *xOthr `xml:"Othr,omitempty"`
}

type xOthr struct {
	ID string `xml:"Id"`
}

type xAmt struct {
	Ccy   string `xml:"Ccy,attr"`
	Value string `xml:",chardata"`
}

type xSts struct {
	Text string `xml:",chardata"`
	Cd   string `xml:"Cd,omitempty"`
}

type xDate struct {
	Dt string `xml:"Dt"`
}

type xPrtry struct {
	Cd string `xml:"Cd"`
}

type xBkTxCd struct {
	Prtry xPrtry `xml:"Prtry"`
}

type xNtry struct {
	XMLName   xml.Name `xml:"Ntry"`
	Amt       xAmt     `xml:"Amt"`
	CdtDbtInd string   `xml:"CdtDbtInd"`
	RvslInd   string   `xml:"RvslInd,omitempty"`
	Sts       xSts     `xml:"Sts"`
	BookgDt   xDate    `xml:"BookgDt"`
	Ref       string   `xml:"AcctSvcrRef,omitempty"`
	BkTxCd    xBkTxCd  `xml:"BkTxCd"`
	NtryDtls  struct {
		TxDtls xTxDtls `xml:"TxDtls"`
	} `xml:"NtryDtls"`
}

type xRefs struct {
	AcctSvcrRef string `xml:"AcctSvcrRef,omitempty"`
	EndToEndID  string `xml:"EndToEndId"`
}

type xRmtInf struct {
	Ustrd string `xml:"Ustrd"`
}

type xTxDtls struct {
	Refs    xRefs `xml:"Refs"`
	AmtDtls struct {
		TxAmt struct {
			Amt xAmt `xml:"Amt"`
		} `xml:"TxAmt"`
	} `xml:"AmtDtls"`
	RltdPties struct {
		DbtrAcct xAccount `xml:"DbtrAcct"`
	} `xml:"RltdPties"`
	RmtInf *xRmtInf `xml:"RmtInf,omitempty"`
}
