package statement

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// csvHeader is the CSV export's header; the 8th column, narrative, is
// optional when reading and always written; a 9th, return_reason (after
// narrative), is read when there: a reversal with a reason code is a
// return (Posting.Return), and a code on a row that is not a reversal is
// refused. WriteCSV writes eight columns.
const csvHeader = "booking_date,bank_key,account,amount_minor,currency,reference,reversal"

var csvColumns = append(strings.Split(csvHeader, ","), "narrative", "return_reason")

func readCSV(r io.Reader, name string, fn func(Posting) error) (Header, error) {
	h := Header{Format: "csv"}
	cr := csv.NewReader(newCSVGuard(r))
	cr.ReuseRecord = true
	ferr := func(line int, elem string, err error) error {
		return &FormatError{File: name, Line: line, Elem: elem, Err: err}
	}
	parseErr := func(err error) error {
		var pe *csv.ParseError
		var long *recordTooLong
		if errors.As(err, &long) {
			return ferr(long.line, "record", err)
		}
		if errors.As(err, &pe) {
			return ferr(pe.Line, fmt.Sprintf("column %d", pe.Column), pe.Err)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	head, err := cr.Read()
	if err != nil {
		return h, parseErr(err)
	}
	got := strings.Join(head, ",")
	if got != csvHeader && got != csvHeader+",narrative" && got != csvHeader+",narrative,return_reason" {
		return h, ferr(1, "header", fmt.Errorf("%q is not %q (with or without a last column narrative, or narrative,return_reason)", got, csvHeader))
	}
	cols := len(head)
	cr.FieldsPerRecord = cols
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return h, nil
		}
		if err != nil {
			return h, parseErr(err)
		}
		line, _ := cr.FieldPos(0)
		bad := func(col int, format string, args ...any) error {
			return ferr(line, csvColumns[col], fmt.Errorf(format, args...))
		}
		day, err := time.ParseInLocation(time.DateOnly, rec[0], time.UTC)
		if err != nil {
			return h, bad(0, "%q is not a date (YYYY-MM-DD)", rec[0])
		}
		// The text columns are trimmed as the camt reader trims its text
		// (xs:token): " CHG-1 " is the bank key CHG-1.
		key, acct, ref := strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2]), strings.TrimSpace(rec[5])
		if key == "" {
			return h, bad(1, "empty")
		}
		if acct == "" {
			return h, bad(2, "empty")
		}
		for _, c := range []int{1, 2, 5} {
			if len(rec[c]) > maxShort {
				return h, bad(c, "longer than %d bytes", maxShort)
			}
		}
		if cols >= 8 && len(rec[7]) > maxText {
			return h, bad(7, "longer than %d bytes", maxText)
		}
		if cols == 9 && len(rec[8]) > maxShort {
			return h, bad(8, "longer than %d bytes", maxShort)
		}
		minor, err := strconv.ParseInt(rec[3], 10, 64)
		if err != nil || minor <= 0 || rec[3][0] < '1' || rec[3][0] > '9' {
			return h, bad(3, "%q is not a positive integer of minor units", rec[3])
		}
		cur := charge.Currency(rec[4])
		if !cur.Valid() {
			return h, bad(4, "%q is not an ISO-4217 currency code", rec[4])
		}
		rev := false
		switch rec[6] {
		case "true":
			rev = true
		case "false", "":
		default:
			return h, bad(6, "%q is not true, false or empty", rec[6])
		}
		p := Posting{
			BankKey:     key,
			Account:     acct,
			Amount:      charge.Money{Minor: minor, Currency: cur},
			Reversal:    rev,
			BookingDate: day,
			Reference:   ref,
			Where:       name + ": line " + strconv.Itoa(line),
		}
		if cols >= 8 {
			p.Narrative = strings.TrimSpace(rec[7])
		}
		if cols == 9 {
			if code := strings.TrimSpace(rec[8]); code != "" {
				if !rev {
					return h, bad(8, "%q on a row that is not a reversal (a return is: reversal true)", code)
				}
				p.Return, p.ReturnReason = true, code
			}
		}
		h.Entries++
		h.Postings++
		if err := fn(p); err != nil {
			return h, err
		}
	}
}

// WriteCSV writes postings as the CSV export, header and narrative column
// included. A posting without a bank key or account, of an amount that is
// not positive or of an unknown currency is refused (nothing after it is
// written; what came before may have been).
func WriteCSV(w io.Writer, postings iter.Seq[Posting]) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns[:8]); err != nil {
		return err
	}
	rec := make([]string, 8)
	n := 0
	for p := range postings {
		n++
		if err := checkPosting(p); err != nil {
			return fmt.Errorf("posting %d: %w", n, err)
		}
		rec[0] = p.BookingDate.Format(time.DateOnly)
		rec[1] = p.BankKey
		rec[2] = p.Account
		rec[3] = strconv.FormatInt(p.Amount.Minor, 10)
		rec[4] = string(p.Amount.Currency)
		rec[5] = p.Reference
		rec[6] = strconv.FormatBool(p.Reversal)
		rec[7] = p.Narrative
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// checkPosting refuses what no reader would give back.
func checkPosting(p Posting) error {
	switch {
	case p.BankKey == "":
		return errors.New("no bank key")
	case p.Account == "":
		return fmt.Errorf("%s: no account", p.BankKey)
	case p.Amount.Minor <= 0:
		return fmt.Errorf("%s: amount %d is not positive", p.BankKey, p.Amount.Minor)
	case !p.Amount.Currency.Valid():
		return fmt.Errorf("%s: %q is not an ISO-4217 currency code", p.BankKey, string(p.Amount.Currency))
	case p.BookingDate.IsZero():
		return fmt.Errorf("%s: no booking date", p.BankKey)
	}
	return nil
}
