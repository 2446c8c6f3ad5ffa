package statement

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// FormatError is a malformed file: its name, the line (1-based; 0 when
// unknown) and the element (XML: a path such as "Ntry/Amt"; CSV: the
// column's name) where the reader found the problem.
type FormatError struct {
	File string
	Line int
	Elem string
	Err  error
}

// Error reads `stmt.xml:41: Ntry/Amt: "25,00" is not a decimal amount`.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Elem != "" {
		b.WriteString(": ")
		b.WriteString(e.Elem)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("malformed")
	}
	return b.String()
}

func (e *FormatError) Unwrap() error { return e.Err }

// AccountNotFoundError: Options.CollectionAccount names an account that no
// Stmt/Ntfctn of the file is for.
type AccountNotFoundError struct {
	File string
	// Account is Options.CollectionAccount as given (the operator's
	// input, not a customer's account).
	Account string
	// Found lists the accounts the file's statements are for, in order,
	// masked (charge.MaskAccount: all but the last four characters
	// starred): on the customers' side they are customers' accounts,
	// which an error message must never print whole.
	Found []string
}

// Error prints the accounts found masked (again, should Found have been
// set whole).
func (e *AccountNotFoundError) Error() string {
	found := "none"
	if len(e.Found) > 0 {
		masked := make([]string, len(e.Found))
		for i, a := range e.Found {
			masked[i] = charge.MaskAccount(a)
		}
		found = strings.Join(masked, ", ")
	}
	return fmt.Sprintf("%s: no statement of collection account %s in the file (accounts found: %s)", e.File, e.Account, found)
}

// CollectionSideError: a file whose only account holds nothing but
// credits from customers' accounts (a collection account's statement) was
// read as the customers' own statements (no Options.CollectionAccount):
// read that way it has no posting of ours, and every charge would look
// unposted.
type CollectionSideError struct {
	File string
	// Account is the statement's account as the file gives it: the
	// collection account (the bank's own, not a customer's), which the
	// operator gives to --collection-account.
	Account string
	// Credits counts the booked credits from other accounts.
	Credits int
}

func (e *CollectionSideError) Error() string {
	return fmt.Sprintf("%s: account %s holds only credits from customers' accounts (%d): a collection account's statement; read it with --collection-account %s",
		e.File, e.Account, e.Credits, e.Account)
}

// ReadFile is Read of the file at path, named by path in errors and in
// each Posting's Where.
func ReadFile(path string, opts Options, fn func(Posting) error) (Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	return Read(f, path, opts, fn)
}

// Read reads one statement file from r, detecting its format from the
// content: an XML document whose root is a camt.053 or camt.054 Document
// (namespace urn:iso:std:iso:20022:tech:xsd:camt.05N.001.NN, NN 02 to 13),
// else the CSV export (see below). It calls fn with each posting of ours, in
// file order, and returns what the file said about itself.
//
// A malformed file gives a *FormatError naming name, the line and the
// element; an error returned by fn stops the read and is returned as is.
// An XML document is read in UTF-8, or in ISO-8859-1 or US-ASCII when its
// declaration says so; another declared encoding is a *FormatError at
// line 1 saying which (wrapping the charset reader's error).
// On an error the Header holds what was read up to it.
//
// # camt
//
// A file holds one Document: after its end only white space, comments and
// processing instructions may follow (a second document, or any other
// content, is a *FormatError). Elements are matched by namespace as well
// as local name: one in a namespace other than the Document's (an
// extension, a vendor's element) is not camt and is skipped as unknown, as
// is an attribute in a namespace (Ccy is unqualified). Every Stmt (camt.053) or Ntfctn (camt.054)
// is read, or with
// Options.CollectionAccount only those of that account (IBAN compared
// without spaces and case, Othr/Id as written); none of it gives an
// *AccountNotFoundError. Of each booked entry (Sts BOOK, written
// <Sts>BOOK</Sts> or <Sts><Cd>BOOK</Cd></Sts> in any version) in the
// direction of the side read, each transaction (NtryDtls/TxDtls) with an
// EndToEndId is a posting; a transaction without one (or "NOTPROVIDED"),
// or an entry without transactions, has no bank key and is counted in
// Header.Unkeyed — but a reversal or return without one is handed over
// with an empty BankKey when Options.UnkeyedReversals asks for it. Entries of another status are skipped. A booked entry in
// the other direction is read for its returns: each transaction with
// return information (TxDtls/RtrInf; its Rsn/Cd, else Rsn/Prtry, is
// Posting.ReturnReason), or with a return's bank transaction code
// (TxDtls/BkTxCd, else Ntry/BkTxCd, PMNT/IDDT or PMNT/RDDT with UPDD,
// PRDD or RCDD; its reason code the first that stands as a word in the
// narrative), is a reversal of ours, the others are skipped
// (and an entry's sum is checked only when all its transactions are
// returns). Read without Options.CollectionAccount, a file whose only
// account has no debit but reversals and returns, and credits naming
// another account as their debtor under an EndToEndId, is refused with a
// *CollectionSideError.
//
// A transaction's amount is its Amt or AmtDtls/TxAmt/Amt (both given in
// one currency, they must agree); a single-transaction entry's may be
// left to the entry's Amt. The
// transactions of an entry with several must each have one, in the
// entry's currency, and their sum must be the entry's Amt.
//
// Postings are handed to fn when their entry has been read (so that the
// sum is checked first), up to 1,000 transactions an entry: a larger batch
// is handed over as it is read, and a sum that does not match is then
// reported after its postings were handed over.
//
// FrToDt gives Header.Period: FrDtTm and ToDtTm (converted to UTC; a time
// without an offset is a wall-clock time in Options.Location, UTC when
// nil), ToDtTm being inclusive, the period ends at the end of its second
// (23:59:59 → the next 00:00:00); FrDt and ToDt (dates) give [FrDt 00:00,
// the day after ToDt 00:00) in Options.Location (UTC when nil).
//
// # CSV
//
// The CSV export has the header
//
//	booking_date,bank_key,account,amount_minor,currency,reference,reversal
//
// and optionally an 8th column, narrative. booking_date is YYYY-MM-DD,
// amount_minor a positive integer of minor units, currency an ISO-4217
// code, reversal true, false or empty (false). bank_key, account,
// reference and narrative are trimmed of the white space around them, as
// the camt reader trims its text (a bank key or account of white space
// only is empty, and refused). As in camt, bank_key, account and
// reference are at most 1 KiB, narrative 64 KiB, and a record (a line, or
// more with quoted newlines) at most 1 MiB of the file, refused as it is
// read. Every row is a posting: the
// export holds only the customers' debits (and their reversals), whatever
// Options.CollectionAccount says. Header.Period is zero.
func Read(r io.Reader, name string, opts Options, fn func(Posting) error) (Header, error) {
	src := &source{r: r}
	br := bufio.NewReaderSize(src, 64<<10)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return Header{}, err
	}
	content := bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	if len(head) != len(content) {
		br.Discard(3)
	}
	content = bytes.TrimLeft(content, " \t\r\n")
	switch {
	case len(content) > 0 && content[0] == '<':
		return readCamt(br, src, name, opts, fn)
	case bytes.HasPrefix(content, []byte("booking_date")):
		return readCSV(br, name, fn)
	case len(content) == 0:
		return Header{}, &FormatError{File: name, Err: errors.New("empty file")}
	default:
		return Header{}, &FormatError{File: name, Line: 1, Err: fmt.Errorf("neither a camt.053/camt.054 XML document nor the CSV export (header %s)", csvHeader)}
	}
}
