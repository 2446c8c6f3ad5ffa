package statement

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// camtNamespace is the prefix of every camt message's namespace; the rest
// is "camt.053.001.NN" or "camt.054.001.NN".
const camtNamespace = "urn:iso:std:iso:20022:tech:xsd:"

// The versions read, of both messages.
const minVersion, maxVersion = 2, 13

// maxBuffered is how many transactions of an entry are held until the
// entry's end (where its sum is checked) before they are handed over as
// they are read.
var maxBuffered = 1000

// message parses a camt namespace: "camt.053.001.08" and the message's
// body and statement element names.
func message(ns string) (format, body, stmt string, err error) {
	name, ok := strings.CutPrefix(ns, camtNamespace)
	if !ok {
		if ns == "" {
			return "", "", "", errors.New("the Document has no namespace: not an ISO 20022 message")
		}
		return "", "", "", fmt.Errorf("namespace %q is not an ISO 20022 message", ns)
	}
	msg, ver, _ := strings.Cut(name, ".001.")
	switch msg {
	case "camt.053":
		body, stmt = "BkToCstmrStmt", "Stmt"
	case "camt.054":
		body, stmt = "BkToCstmrDbtCdtNtfctn", "Ntfctn"
	default:
		return "", "", "", fmt.Errorf("message %s is not a statement this reader knows (camt.053 or camt.054)", name)
	}
	n, err := strconv.Atoi(ver)
	if err != nil || len(ver) != 2 || n < minVersion || n > maxVersion {
		return "", "", "", fmt.Errorf("%s: version %q is not one this reader knows (.001.%02d to .001.%02d)", msg, ver, minVersion, maxVersion)
	}
	return name, body, stmt, nil
}

// source keeps the error of the reader under the decoder, so that it is
// told from the decoder's own (a malformed file).
type source struct {
	r   io.Reader
	err error
}

func (s *source) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

type camtReader struct {
	src  *source
	d    *xml.Decoder
	file string
	fn   func(Posting) error
	h    Header
	loc  *time.Location // where FrToDt's times and dates without an offset are (Options.Location)

	collection       bool
	unkeyedRev       bool // Options.UnkeyedReversals
	wantIBAN, wantID string
	found            []string
	matched          bool
	// Read as the customers' side: the accounts of the file's statements
	// (whole), the booked debits read that are neither a reversal nor a
	// return, and the booked credits that name another account as their
	// debtor (CollectionSideError).
	accounts       []string
	debits, others int

	ns       string // the Document's namespace: the camt message's
	stmtName string
	acct     string // the account of the statement being read
	entryN   int
	e        entry
	buf      []Posting
	text     []byte
}

// entry is what an Ntry said before its transactions, and the tally of
// them.
type entry struct {
	line, n       int
	amt           charge.Money
	amtLine       int
	hasAmt        bool
	ind           string // CRDT or DBIT
	rvsl          bool
	sts           string
	booking       time.Time
	hasBooking    bool
	ref, addtl    string
	decided, ours bool
	// returns: an entry in the direction opposite to ours, not a
	// reversal: its transactions with return information (RtrInf) are
	// returns of ours, the others are skipped; all counts them all.
	returns bool
	all     int
	other   bool // a credit naming another account as its debtor (customers' side)
	rtr     bool // a transaction has return information
	// coded: the entry's bank transaction code (BkTxCd/Domn) is a return
	// of a direct debit (returnCode), whatever RtrInf says.
	coded        bool
	ntx, missing int // transactions, of them without an amount
	missingLine  int
	sum          int64
	streaming    bool
}

func readCamt(br *bufio.Reader, src *source, name string, opts Options, fn func(Posting) error) (Header, error) {
	r := &camtReader{src: src, d: xml.NewDecoder(newXMLGuard(br)), file: name, fn: fn, loc: opts.Location, unkeyedRev: opts.UnkeyedReversals}
	if r.loc == nil {
		r.loc = time.UTC
	}
	r.d.CharsetReader = charsetReader
	if a := strings.TrimSpace(opts.CollectionAccount); a != "" {
		r.collection = true
		r.wantIBAN, r.wantID = normIBAN(a), a
	}
	err := r.document()
	if err == nil && r.collection && !r.matched {
		err = &AccountNotFoundError{File: name, Account: opts.CollectionAccount, Found: r.found}
	}
	if err == nil && !r.collection && len(r.accounts) == 1 && r.debits == 0 && r.others > 0 {
		err = &CollectionSideError{File: name, Account: r.accounts[0], Credits: r.others}
	}
	return r.h, err
}

func (r *camtReader) line() int {
	l, _ := r.d.InputPos()
	return l
}

func (r *camtReader) errf(line int, elem, format string, args ...any) error {
	return &FormatError{File: r.file, Line: line, Elem: elem, Err: fmt.Errorf(format, args...)}
}

// tokErr turns the decoder's error inside elem into a FormatError; an
// error of the reader underneath is returned as is (named by the file).
func (r *camtReader) tokErr(elem string, err error) error {
	var se *xml.SyntaxError
	switch {
	case r.src.err != nil && errors.Is(err, r.src.err):
		return fmt.Errorf("%s: %w", r.file, err)
	case errors.As(err, &se):
		return &FormatError{File: r.file, Line: se.Line, Elem: elem, Err: errors.New(se.Msg)}
	case errors.Is(err, io.EOF):
		return &FormatError{File: r.file, Line: r.line(), Elem: elem, Err: errors.New("unexpected end of file")}
	}
	return &FormatError{File: r.file, Line: r.line(), Elem: elem, Err: err}
}

// children calls f for each child element of the element just started
// (named elem in errors) that is in the Document's namespace; f reads the
// child whole (text, children, skip). A child in another namespace is not
// camt (an extension, a vendor's element of the same local name): it is
// skipped as unknown.
func (r *camtReader) children(elem string, f func(se xml.StartElement, line int) error) error {
	for {
		tok, err := r.d.Token()
		if err != nil {
			return r.tokErr(elem, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Space != r.ns {
				if err := r.skip(elem + "/" + t.Name.Local); err != nil {
					return err
				}
				continue
			}
			if err := f(t, r.line()); err != nil {
				return err
			}
		case xml.EndElement:
			return nil
		}
	}
}

func (r *camtReader) skip(elem string) error {
	if err := r.d.Skip(); err != nil {
		return r.tokErr(elem, err)
	}
	return nil
}

// leaf reads the text of the element just started, trimmed of the white
// space around it (xs:token and xs:decimal collapse it); a child element in
// it is skipped. A text longer than maxShort is refused.
func (r *camtReader) leaf(elem string) (string, error) {
	return r.leafMax(elem, maxShort)
}

// leafMax is leaf of a text of up to max bytes (after decoding, before
// trimming).
func (r *camtReader) leafMax(elem string, max int) (string, error) {
	r.text = r.text[:0]
	for {
		tok, err := r.d.Token()
		if err != nil {
			return "", r.tokErr(elem, err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(r.text)+len(t) > max {
				return "", r.errf(r.line(), elem, "a text longer than %d bytes", max)
			}
			r.text = append(r.text, t...)
		case xml.StartElement:
			if err := r.skip(elem + "/" + t.Name.Local); err != nil {
				return "", err
			}
		case xml.EndElement:
			return strings.TrimSpace(string(r.text)), nil
		}
	}
}

func (r *camtReader) document() error {
	var root xml.StartElement
	for {
		tok, err := r.d.Token()
		if errors.Is(err, io.EOF) {
			return r.errf(r.line(), "", "no root element")
		}
		if err != nil {
			return r.tokErr("", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			root = se
			break
		}
	}
	if root.Name.Local != "Document" {
		return r.errf(r.line(), root.Name.Local, "the root element is not an ISO 20022 Document")
	}
	format, body, stmt, err := message(root.Name.Space)
	if err != nil {
		return &FormatError{File: r.file, Line: r.line(), Elem: "Document", Err: err}
	}
	r.h.Format, r.stmtName, r.ns = format, stmt, root.Name.Space
	seen := false
	err = r.children("Document", func(se xml.StartElement, line int) error {
		switch se.Name.Local {
		case body:
			seen = true
			return r.children(body, func(se xml.StartElement, line int) error {
				if se.Name.Local == stmt {
					return r.statement(line)
				}
				return r.skip(body + "/" + se.Name.Local)
			})
		case "BkToCstmrStmt", "BkToCstmrDbtCdtNtfctn", "BkToCstmrAcctRpt":
			return r.errf(line, "Document/"+se.Name.Local, "not the body of a %s message (%s)", format, body)
		}
		return r.skip("Document/" + se.Name.Local)
	})
	if err != nil {
		return err
	}
	if !seen {
		return r.errf(r.line(), "Document", "no %s in the document", body)
	}
	return r.epilog()
}

// epilog reads what follows the root element's end to the end of the
// file: only white space, comments and processing instructions may (XML's
// Misc); anything else — a second Document, text — is refused rather than
// left unread.
func (r *camtReader) epilog() error {
	for {
		tok, err := r.d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return r.tokErr("", err)
		}
		switch t := tok.(type) {
		case xml.Comment:
		case xml.ProcInst:
			if strings.EqualFold(t.Target, "xml") {
				return r.errf(r.line(), "", "an XML declaration after the end of the Document (one document a file)")
			}
		case xml.CharData:
			if len(strings.TrimLeft(string(t), " \t\r\n")) > 0 {
				return r.errf(r.line(), "", "text after the end of the Document")
			}
		case xml.StartElement:
			return r.errf(r.line(), t.Name.Local, "an element after the end of the Document (one document a file)")
		default:
			return r.errf(r.line(), "", "content after the end of the Document")
		}
	}
}

func normIBAN(s string) string {
	return strings.ToUpper(strings.Join(strings.Fields(s), ""))
}

// account is an Acct (or DbtrAcct): its Id/IBAN, else its Id/Othr/Id.
type account struct{ iban, othr string }

// String is the IBAN in its electronic form (no spaces, upper case), else
// the Othr/Id as written.
func (a account) String() string {
	if a.iban != "" {
		return normIBAN(a.iban)
	}
	return a.othr
}

func (r *camtReader) account(elem string) (account, error) {
	var a account
	err := r.children(elem, func(se xml.StartElement, line int) error {
		if se.Name.Local != "Id" {
			return r.skip(elem + "/" + se.Name.Local)
		}
		return r.children(elem+"/Id", func(se xml.StartElement, line int) error {
			var err error
			switch se.Name.Local {
			case "IBAN":
				a.iban, err = r.leaf(elem + "/Id/IBAN")
				return err
			case "Othr":
				return r.children(elem+"/Id/Othr", func(se xml.StartElement, line int) error {
					if se.Name.Local == "Id" {
						a.othr, err = r.leaf(elem + "/Id/Othr/Id")
						return err
					}
					return r.skip(elem + "/Id/Othr/" + se.Name.Local)
				})
			}
			return r.skip(elem + "/Id/" + se.Name.Local)
		})
	})
	return a, err
}

func (r *camtReader) matches(a account) bool {
	if a.iban != "" {
		return normIBAN(a.iban) == r.wantIBAN
	}
	return a.othr == r.wantID
}

func (r *camtReader) statement(line int) error {
	s := r.stmtName
	var (
		period     Period
		havePeriod bool
		acct       account
		haveAcct   bool
		skipping   bool
	)
	err := r.children(s, func(se xml.StartElement, line int) error {
		name := se.Name.Local
		if skipping {
			return r.skip(s + "/" + name)
		}
		switch name {
		case "FrToDt":
			var err error
			period, err = r.period(s + "/FrToDt")
			havePeriod = err == nil && !period.From.IsZero()
			return err
		case "Acct":
			var err error
			if acct, err = r.account(s + "/Acct"); err != nil {
				return err
			}
			if acct.String() == "" {
				return r.errf(line, s+"/Acct", "neither Id/IBAN nor Id/Othr/Id")
			}
			haveAcct = true
			r.found = append(r.found, charge.MaskAccount(acct.String()))
			if r.collection && !r.matches(acct) {
				skipping = true
			}
			r.acct = acct.String()
			if !slices.Contains(r.accounts, r.acct) {
				r.accounts = append(r.accounts, r.acct)
			}
			return nil
		case "Ntry":
			if !haveAcct {
				return r.errf(line, s+"/Acct", "missing before the first Ntry")
			}
			return r.entry(line)
		}
		return r.skip(s + "/" + name)
	})
	if err != nil {
		return err
	}
	if !haveAcct {
		return r.errf(line, s+"/Acct", "missing")
	}
	if skipping {
		return nil
	}
	r.matched = true
	if havePeriod {
		if r.h.Period.From.IsZero() || period.From.Before(r.h.Period.From) {
			r.h.Period.From = period.From
		}
		if period.To.After(r.h.Period.To) {
			r.h.Period.To = period.To
		}
	}
	return nil
}

// parseDateTime reads an ISODateTime: with an offset or Z, or without
// (taken as a wall-clock time in loc); fractional seconds allowed.
func parseDateTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05.999999999", s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an ISO date and time", s)
	}
	return t, nil
}

// parseDate reads an ISODate: its midnight in loc.
func parseDate(s string, loc *time.Location) (time.Time, error) {
	t, err := time.ParseInLocation(time.DateOnly, s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an ISO date (YYYY-MM-DD)", s)
	}
	return t, nil
}

// period reads FrToDt: FrDtTm/ToDtTm (ToDtTm inclusive: the period ends at
// the end of its second) or FrDt/ToDt (whole days); what has no offset is
// in r.loc (Options.Location). The period is in UTC.
func (r *camtReader) period(elem string) (Period, error) {
	var p Period
	var fromSet, toSet bool
	err := r.children(elem, func(se xml.StartElement, line int) error {
		name := se.Name.Local
		path := elem + "/" + name
		switch name {
		case "FrDtTm", "ToDtTm", "FrDt", "ToDt":
		default:
			return r.skip(path)
		}
		text, err := r.leaf(path)
		if err != nil {
			return err
		}
		var t time.Time
		if strings.HasSuffix(name, "DtTm") {
			t, err = parseDateTime(text, r.loc)
		} else {
			t, err = parseDate(text, r.loc)
		}
		if err != nil {
			return &FormatError{File: r.file, Line: line, Elem: path, Err: err}
		}
		switch name {
		case "FrDtTm", "FrDt":
			p.From, fromSet = t.UTC(), true
		case "ToDtTm":
			p.To, toSet = t.UTC().Truncate(time.Second).Add(time.Second), true
		case "ToDt":
			// The next midnight in the bank's zone (a day there may not
			// be 24 hours long).
			p.To, toSet = t.AddDate(0, 0, 1).UTC(), true
		}
		return nil
	})
	if err != nil {
		return Period{}, err
	}
	line := r.line()
	switch {
	case fromSet != toSet:
		return Period{}, r.errf(line, elem, "a start without an end, or an end without a start")
	case fromSet && !p.To.After(p.From):
		return Period{}, r.errf(line, elem, "ends (%s) before it starts (%s)", p.To.Format(time.RFC3339), p.From.Format(time.RFC3339))
	}
	return p, nil
}

// amount reads an Amt element just started: its text and Ccy attribute.
func (r *camtReader) amount(se xml.StartElement, line int, elem string) (charge.Money, error) {
	ccy, hasCcy := "", false
	for _, a := range se.Attr {
		if a.Name.Local == "Ccy" && a.Name.Space == "" {
			ccy, hasCcy = strings.TrimSpace(a.Value), true
		}
	}
	text, err := r.leaf(elem)
	if err != nil {
		return charge.Money{}, err
	}
	if !hasCcy {
		return charge.Money{}, r.errf(line, elem, "no Ccy attribute")
	}
	m, err := ParseAmount(text, charge.Currency(ccy))
	if err != nil {
		return charge.Money{}, &FormatError{File: r.file, Line: line, Elem: elem, Err: err}
	}
	return m, nil
}

// status reads Sts in either shape: <Sts>BOOK</Sts> (up to .001.07) or
// <Sts><Cd>BOOK</Cd></Sts> (a proprietary status is never BOOK).
func (r *camtReader) status(line int) (string, error) {
	var text []byte
	code := ""
	for {
		tok, err := r.d.Token()
		if err != nil {
			return "", r.tokErr("Ntry/Sts", err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(text)+len(t) > maxShort {
				return "", r.errf(r.line(), "Ntry/Sts", "a text longer than %d bytes", maxShort)
			}
			text = append(text, t...)
		case xml.StartElement:
			name := t.Name.Local
			if t.Name.Space != r.ns {
				name = "" // not camt: skipped
			}
			switch name {
			case "Cd":
				if code, err = r.leaf("Ntry/Sts/Cd"); err != nil {
					return "", err
				}
			case "Prtry":
				if _, err := r.leaf("Ntry/Sts/Prtry"); err != nil {
					return "", err
				}
				code = "(proprietary)"
			default:
				if err := r.skip("Ntry/Sts/" + t.Name.Local); err != nil {
					return "", err
				}
			}
		case xml.EndElement:
			if code == "" {
				code = strings.TrimSpace(string(text))
			}
			if code == "" {
				return "", r.errf(line, "Ntry/Sts", "empty")
			}
			return code, nil
		}
	}
}

func parseBool(s string) (bool, error) {
	switch s {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not true or false", s)
}

func (r *camtReader) entry(line int) error {
	r.entryN++
	r.e = entry{line: line, n: r.entryN}
	r.buf = r.buf[:0]
	e := &r.e
	err := r.children("Ntry", func(se xml.StartElement, line int) error {
		name := se.Name.Local
		path := "Ntry/" + name
		var err error
		var text string
		switch name {
		case "Amt":
			e.amt, err = r.amount(se, line, path)
			e.hasAmt, e.amtLine = err == nil, line
			return err
		case "CdtDbtInd":
			if text, err = r.leaf(path); err != nil {
				return err
			}
			if text != "CRDT" && text != "DBIT" {
				return r.errf(line, path, "%q is neither CRDT nor DBIT", text)
			}
			e.ind = text
		case "RvslInd":
			if text, err = r.leaf(path); err != nil {
				return err
			}
			if e.rvsl, err = parseBool(text); err != nil {
				return &FormatError{File: r.file, Line: line, Elem: path, Err: err}
			}
		case "Sts":
			e.sts, err = r.status(line)
			return err
		case "BookgDt":
			return r.children(path, func(se xml.StartElement, line int) error {
				p := path + "/" + se.Name.Local
				switch se.Name.Local {
				case "Dt", "DtTm":
				default:
					return r.skip(p)
				}
				text, err := r.leaf(p)
				if err != nil {
					return err
				}
				var t time.Time
				if se.Name.Local == "Dt" {
					t, err = parseDate(text, time.UTC)
				} else {
					// The date as the bank wrote it (its own day), not
					// the date in UTC.
					t, err = parseDateTime(text, time.UTC)
					y, m, d := t.Date()
					t = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
				}
				if err != nil {
					return &FormatError{File: r.file, Line: line, Elem: p, Err: err}
				}
				e.booking, e.hasBooking = t, true
				return nil
			})
		case "AcctSvcrRef":
			e.ref, err = r.leaf(path)
			return err
		case "BkTxCd":
			e.coded, err = r.bankTxCode(path)
			return err
		case "AddtlNtryInf":
			e.addtl, err = r.leafMax(path, maxText)
			return err
		case "NtryDtls":
			if err := r.decide(line); err != nil {
				return err
			}
			if !e.ours && !e.returns {
				return r.skip(path)
			}
			return r.children(path, func(se xml.StartElement, line int) error {
				if se.Name.Local == "TxDtls" {
					return r.transaction(line)
				}
				return r.skip(path + "/" + se.Name.Local) // Btch and the rest
			})
		default:
			return r.skip(path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := r.decide(line); err != nil {
		return err
	}
	if e.sts != "BOOK" {
		return nil
	}
	r.h.Entries++
	if e.ind == "DBIT" && !e.rvsl && !e.rtr && !e.coded {
		r.debits++
	}
	if e.other {
		r.others++
	}
	if !e.ours && (!e.returns || e.ntx == 0 && !(e.coded && e.all == 0)) {
		return nil
	}
	if e.ntx == 0 {
		if r.unkeyedRev && e.all == 0 && (e.ours && e.rvsl || e.returns && e.coded) {
			// A reversal (or a return told by its code) booked without
			// transaction details: its entry's reference names what it
			// reverses.
			p := Posting{Account: r.acct, Amount: e.amt, Reversal: true, Return: !e.rvsl, BookingDate: e.booking, Reference: e.ref, Narrative: e.addtl,
				Where: r.file + ":" + strconv.Itoa(line) + ": entry " + strconv.Itoa(e.n)}
			if r.collection {
				p.Account = ""
			}
			if p.Return {
				p.ReturnReason = reasonIn(e.addtl)
			}
			return r.emit(p)
		}
		r.h.Unkeyed++
		return nil
	}
	// An entry of returns sums to its Amt when all its transactions are
	// returns (a batch may hold others, not ours).
	if e.missing == 0 && e.sum != e.amt.Minor && (!e.returns || e.ntx == e.all) {
		return r.errf(line, "Ntry", "entry %d%s: its %d transactions sum to %s, its Amt is %s",
			e.n, r.refNote(), e.ntx, FormatAmount(charge.Money{Minor: e.sum, Currency: e.amt.Currency}), FormatAmount(e.amt))
	}
	for i := range r.buf {
		p := &r.buf[i]
		if e.ntx == 1 && p.Narrative == "" {
			p.Narrative = e.addtl
		}
		if p.Return && p.ReturnReason == "" {
			// A return without RtrInf (told by its bank transaction
			// code): the reason, if any, is in the narrative.
			p.ReturnReason = reasonIn(p.Narrative, e.addtl)
		}
		if err := r.emit(*p); err != nil {
			return err
		}
	}
	r.buf = r.buf[:0]
	return nil
}

func (r *camtReader) refNote() string {
	if r.e.ref == "" {
		return ""
	}
	return " (AcctSvcrRef " + r.e.ref + ")"
}

// decide checks, once per entry, that what comes before its transactions
// is there, and whether the entry is ours: booked, in the side's direction
// (collection account: a credit, or a debit reversing one; customer
// accounts: a debit, or a credit reversing one).
func (r *camtReader) decide(line int) error {
	e := &r.e
	if e.decided {
		return nil
	}
	e.decided = true
	switch {
	case !e.hasAmt:
		return r.errf(line, "Ntry/Amt", "missing in entry %d", e.n)
	case e.ind == "":
		return r.errf(line, "Ntry/CdtDbtInd", "missing in entry %d", e.n)
	case e.sts == "":
		return r.errf(line, "Ntry/Sts", "missing in entry %d", e.n)
	}
	normal, reversal := "DBIT", "CRDT"
	if r.collection {
		normal, reversal = "CRDT", "DBIT"
	}
	e.ours = e.sts == "BOOK" && (e.ind == normal && !e.rvsl || e.ind == reversal && e.rvsl)
	e.returns = e.sts == "BOOK" && e.ind == reversal && !e.rvsl
	if (e.ours || e.returns) && !e.hasBooking {
		return r.errf(line, "Ntry/BookgDt", "missing in booked entry %d", e.n)
	}
	return nil
}

type txn struct {
	key, ref, addtl string
	ustrd           []string
	amt             charge.Money
	hasAmt          bool
	amtLine         int
	amtElem         string
	// txAmt is AmtDtls/TxAmt/Amt when TxDtls/Amt is there too: the two
	// must agree where they are of one currency.
	txAmt     charge.Money
	hasTxAmt  bool
	txAmtLine int
	debtor    account
	rtr       bool   // RtrInf is there
	reason    string // RtrInf/Rsn/Cd, else /Prtry
	coded     bool   // TxDtls/BkTxCd is a return's (returnCode)
	hasCode   bool   // TxDtls/BkTxCd is there
}

// returnSubFamilies are the ISO 20022 bank transaction sub-family codes
// (ExternalBankTransactionSubFamily1Code) of a direct debit coming back,
// under the domain PMNT and the family IDDT (issued direct debits: the
// collection account's side) or RDDT (received: the customer's):
// UPDD a return or unpaid direct debit, PRDD a reversal due to a payment
// return, RCDD a reversal due to a payment cancellation request. Many
// banks book a return this way, with no RtrInf and the reason only in the
// narrative.
var returnSubFamilies = map[string]bool{"UPDD": true, "PRDD": true, "RCDD": true}

// returnCode reports whether domain/family/sub-family is a direct
// debit's return (returnSubFamilies).
func returnCode(domain, family, sub string) bool {
	return domain == "PMNT" && (family == "IDDT" || family == "RDDT") && returnSubFamilies[sub]
}

// bankTxCode reads a BkTxCd just started (Ntry/BkTxCd or TxDtls/BkTxCd)
// and reports whether its Domn is a direct debit's return (returnCode).
// A proprietary code (Prtry) is the bank's own and says nothing here.
func (r *camtReader) bankTxCode(path string) (bool, error) {
	var domain, family, sub string
	err := r.children(path, func(se xml.StartElement, line int) error {
		if se.Name.Local != "Domn" {
			return r.skip(path + "/" + se.Name.Local)
		}
		return r.children(path+"/Domn", func(se xml.StartElement, line int) error {
			p := path + "/Domn/" + se.Name.Local
			switch se.Name.Local {
			case "Cd":
				var err error
				domain, err = r.leaf(p)
				return err
			case "Fmly":
				return r.children(p, func(se xml.StartElement, line int) error {
					var err error
					switch se.Name.Local {
					case "Cd":
						family, err = r.leaf(p + "/Cd")
					case "SubFmlyCd":
						sub, err = r.leaf(p + "/SubFmlyCd")
					default:
						err = r.skip(p + "/" + se.Name.Local)
					}
					return err
				})
			}
			return r.skip(p)
		})
	})
	return returnCode(domain, family, sub), err
}

// reasonIn is the first ISO 20022 return reason code (returnReasons) that
// stands as a word of one of the texts ("RETURN AC04 ACCOUNT CLOSED" →
// AC04), "" when none does.
func reasonIn(texts ...string) string {
	for _, text := range texts {
		for _, w := range strings.FieldsFunc(text, func(c rune) bool {
			return !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9')
		}) {
			if _, ok := returnReasons[w]; ok {
				return w
			}
		}
	}
	return ""
}

// returnInfo reads RtrInf: its reason (Rsn/Cd, else Rsn/Prtry).
func (r *camtReader) returnInfo(path string, t *txn) error {
	t.rtr = true
	return r.children(path, func(se xml.StartElement, line int) error {
		if se.Name.Local != "Rsn" {
			return r.skip(path + "/" + se.Name.Local)
		}
		return r.children(path+"/Rsn", func(se xml.StartElement, line int) error {
			p := path + "/Rsn/" + se.Name.Local
			switch se.Name.Local {
			case "Cd", "Prtry":
			default:
				return r.skip(p)
			}
			text, err := r.leaf(p)
			if err != nil {
				return err
			}
			if se.Name.Local == "Cd" || t.reason == "" {
				t.reason = text
			}
			return nil
		})
	})
}

func (r *camtReader) transaction(line int) error {
	e := &r.e
	e.ntx++
	var t txn
	t.ustrd = make([]string, 0, 2)
	ustrdLen := 0 // of the Ustrd kept, joined by a space
	err := r.children("TxDtls", func(se xml.StartElement, line int) error {
		name := se.Name.Local
		path := "TxDtls/" + name
		var err error
		switch name {
		case "Refs":
			return r.children(path, func(se xml.StartElement, line int) error {
				var err error
				switch se.Name.Local {
				case "EndToEndId":
					t.key, err = r.leaf(path + "/EndToEndId")
				case "AcctSvcrRef":
					t.ref, err = r.leaf(path + "/AcctSvcrRef")
				default:
					err = r.skip(path + "/" + se.Name.Local)
				}
				return err
			})
		case "Amt":
			t.amt, err = r.amount(se, line, path)
			t.hasAmt, t.amtLine, t.amtElem = true, line, path
			return err
		case "AmtDtls":
			return r.children(path, func(se xml.StartElement, line int) error {
				if se.Name.Local != "TxAmt" {
					return r.skip(path + "/" + se.Name.Local)
				}
				return r.children(path+"/TxAmt", func(se xml.StartElement, line int) error {
					p := path + "/TxAmt/" + se.Name.Local
					if se.Name.Local != "Amt" {
						return r.skip(p)
					}
					m, err := r.amount(se, line, p)
					if err != nil {
						return err
					}
					t.txAmt, t.hasTxAmt, t.txAmtLine = m, true, line
					if !t.hasAmt { // TxDtls/Amt, when both are there
						t.amt, t.hasAmt, t.amtLine, t.amtElem = m, true, line, p
					}
					return nil
				})
			})
		case "RltdPties":
			return r.children(path, func(se xml.StartElement, line int) error {
				if se.Name.Local == "DbtrAcct" {
					var err error
					t.debtor, err = r.account(path + "/DbtrAcct")
					return err
				}
				return r.skip(path + "/" + se.Name.Local)
			})
		case "RmtInf":
			return r.children(path, func(se xml.StartElement, line int) error {
				if se.Name.Local != "Ustrd" {
					return r.skip(path + "/" + se.Name.Local)
				}
				s, err := r.leafMax(path+"/Ustrd", maxText)
				if err != nil {
					return err
				}
				if s != "" {
					if ustrdLen += len(s) + 1; ustrdLen > maxText+1 {
						return r.errf(line, path+"/Ustrd", "the transaction's remittance texts together are longer than %d bytes", maxText)
					}
					t.ustrd = append(t.ustrd, s)
				}
				return nil
			})
		case "AddtlTxInf":
			t.addtl, err = r.leafMax(path, maxText)
			return err
		case "RtrInf":
			return r.returnInfo(path, &t)
		case "BkTxCd":
			t.hasCode = true
			t.coded, err = r.bankTxCode(path)
			return err
		}
		return r.skip(path)
	})
	if err != nil {
		return err
	}
	if t.hasTxAmt && t.txAmt.Currency == t.amt.Currency && t.txAmt != t.amt {
		// Which of the two the account was booked with cannot be told:
		// matching either could pass a posting of another amount.
		return r.errf(t.txAmtLine, "TxDtls/AmtDtls/TxAmt/Amt", "%s is not the transaction's Amt (%s)", FormatAmount(t.txAmt), FormatAmount(t.amt))
	}
	// A return: return information, or a return's bank transaction code
	// (the transaction's, else its entry's) on an entry that is no
	// reversal (a reversal with that code stays a reversal: RvslInd says
	// what it is).
	coded := e.coded
	if t.hasCode {
		coded = t.coded
	}
	isReturn := t.rtr || coded && !e.rvsl
	if isReturn {
		e.rtr = true
	}
	if e.returns {
		e.all++
		if !r.collection && t.key != "" && t.key != "NOTPROVIDED" && t.debtor.String() != "" && t.debtor.String() != r.acct {
			e.other = true
		}
		if !isReturn {
			e.ntx-- // not a return: not ours
			return nil
		}
	}
	if t.hasAmt {
		switch {
		case t.amt.Currency != e.amt.Currency:
			return r.errf(t.amtLine, t.amtElem, "currency %s is not the entry's (%s)", t.amt.Currency, e.amt.Currency)
		case e.sum > math.MaxInt64-t.amt.Minor:
			return r.errf(t.amtLine, t.amtElem, "the transactions of entry %d sum beyond an int64", e.n)
		}
		e.sum += t.amt.Minor
	} else {
		if e.missing == 0 {
			e.missingLine = line
		}
		e.missing++
		t.amt = e.amt // a single transaction's amount is its entry's
	}
	if e.ntx > 1 && e.missing > 0 {
		return r.errf(e.missingLine, "TxDtls/Amt", "entry %d%s has several transactions: each needs its Amt or AmtDtls/TxAmt/Amt", e.n, r.refNote())
	}
	// A transaction without a bank key is no posting of ours; a reversal
	// (or return) without one — a bank's own storno, which names by its
	// bank reference the posting it reverses — is handed over with no key
	// when asked for (Options.UnkeyedReversals).
	unkeyed := t.key == "" || t.key == "NOTPROVIDED"
	if unkeyed && !(r.unkeyedRev && (e.rvsl || e.returns)) {
		r.h.Unkeyed++
		return nil
	}
	if unkeyed {
		t.key = ""
	}
	if t.amt.Minor == 0 { // a posting of nothing
		if t.hasAmt {
			return r.errf(t.amtLine, t.amtElem, "zero amount")
		}
		return r.errf(e.amtLine, "Ntry/Amt", "zero amount")
	}
	p := Posting{
		BankKey:     t.key,
		Account:     r.acct,
		Amount:      t.amt,
		Reversal:    e.rvsl || e.returns,
		BookingDate: e.booking,
		Reference:   t.ref,
		Narrative:   strings.Join(t.ustrd, " "),
		Where:       r.file + ":" + strconv.Itoa(line) + ": entry " + strconv.Itoa(e.n) + ", transaction " + strconv.Itoa(e.ntx),
	}
	if r.collection {
		p.Account = t.debtor.String()
		// A return may leave the parties out: it is paired by key,
		// reference and amount, not by account.
		if p.Account == "" && !e.returns && !unkeyed {
			return r.errf(line, "TxDtls/RltdPties/DbtrAcct", "missing: the customer's account of %s", t.key)
		}
	}
	if isReturn && !p.Reversal {
		// A return in the direction of a posting: another account's
		// return (the fee account's, beside the customers' statements),
		// never a posting of ours.
		r.h.Unkeyed++
		return nil
	}
	if isReturn {
		p.Return, p.ReturnReason = true, t.reason
	}
	if p.Reference == "" {
		p.Reference = e.ref
	}
	if p.Narrative == "" {
		p.Narrative = t.addtl
	}
	if !e.streaming && len(r.buf) < maxBuffered {
		r.buf = append(r.buf, p)
		return nil
	}
	if !e.streaming {
		e.streaming = true
		for _, q := range r.buf {
			if err := r.emit(q); err != nil {
				return err
			}
		}
		r.buf = r.buf[:0]
	}
	return r.emit(p)
}

func (r *camtReader) emit(p Posting) error {
	r.h.Postings++
	return r.fn(p)
}

// charsetReader lets a document declare ISO-8859-1 (or US-ASCII) rather
// than UTF-8.
func charsetReader(label string, in io.Reader) (io.Reader, error) {
	switch strings.ToLower(label) {
	case "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "l1":
		return &latin1{r: bufio.NewReader(in)}, nil
	case "us-ascii", "ascii":
		return in, nil
	}
	return nil, fmt.Errorf("encoding %q is not read (UTF-8, ISO-8859-1 or US-ASCII)", label)
}

type latin1 struct {
	r       *bufio.Reader
	two     [2]byte
	pending []byte
}

func (l *latin1) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(l.pending) > 0 {
			c := copy(p[n:], l.pending)
			l.pending, n = l.pending[c:], n+c
			continue
		}
		b, err := l.r.ReadByte()
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if b < 0x80 {
			p[n] = b
			n++
			continue
		}
		l.two = [2]byte{0xc0 | b>>6, 0x80 | b&0x3f}
		l.pending = l.two[:]
	}
	return n, nil
}
