package reconcile

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/internal/safetext"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// Counts is the number of open breaks of each kind, every kind named.
func (r Report) Counts() map[string]int {
	m := make(map[string]int, len(Kinds))
	for _, k := range Kinds {
		m[string(k)] = 0
	}
	for _, b := range r.Breaks {
		m[string(b.Kind)]++
	}
	return m
}

// postedText is the postings of b in a cell: "CHG-1 INR 25.00 2026-12-01 REF".
func (b Break) postedText() string {
	var w []string
	for _, p := range b.Posted {
		s := fmt.Sprintf("%s %s %s %s", p.BankKey, p.Amount, p.BookingDate, p.Reference)
		switch {
		case p.Return:
			s = "return " + statement.ReturnReasonText(p.ReturnReason) + " " + s
		case p.Reversal:
			s = "reversal " + s
		}
		w = append(w, strings.TrimSpace(s))
	}
	return strings.Join(w, "; ")
}

// WriteText prints r for a person: the counts, then each break with what
// disagrees and what to do.
func (r Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "period %s to %s: %d postings (%d reversals), %d matched (%d by key only), %d in flight, %d breaks (%d resolved earlier)\n",
		r.Period.From, r.Period.To, r.Postings, r.Reversals, r.Matched, r.Unverified, r.InFlight, len(r.Breaks), r.Resolved)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", clean(n))
	}
	if len(r.Breaks) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nKIND\tCHARGE\tACCOUNT\tRECORD\tPOSTED")
	for _, b := range r.Breaks {
		rec := "none"
		if b.State != "" {
			rec = strings.TrimSpace(fmt.Sprintf("%s %s gen %d", b.State, b.Status, b.Generation))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Kind, clean(b.ChargeID), clean(or(b.Account, "-")), clean(rec), clean(or(b.postedText(), "-")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range r.Breaks {
		fmt.Fprintf(w, "\n%s %s (break %s)\n  %s\n  do: %s\n", b.Kind, clean(b.ChargeID), b.ID, clean(b.Detail), clean(b.Action))
	}
	return nil
}

// CSVHeader is the header of WriteCSV.
var CSVHeader = []string{"kind", "charge_id", "bank_keys", "account", "record_state", "record_status", "generation", "record_reference",
	"posted", "detail", "action", "break_id"}

// WriteCSV prints one row per break (accounts masked).
func (r Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, b := range r.Breaks {
		gen := ""
		if b.Generation > 0 {
			gen = fmt.Sprint(b.Generation)
		}
		row := []string{string(b.Kind), b.ChargeID, strings.Join(b.BankKeys, " "), b.Account, b.State, b.Status, gen, charge.ShowRef(b.Reference),
			b.postedText(), b.Detail, b.Action, b.ID}
		for i := range row {
			row[i] = cell(row[i])
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// cell keeps a spreadsheet from reading a cell as a formula: text from
// the bank (a reference) that starts with =, +, -, @, a tab or a carriage
// return gets a leading apostrophe (OWASP's CSV injection advice). Its
// control and invisible format characters are escaped (safetext.Text): a
// bidirectional override would reorder the cell as it is shown.
func cell(s string) string {
	s = safetext.Text(s)
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// clean shows text from outside (a bank's reference, a narrative) with
// its control and invisible format characters escaped (safetext.Text), so
// that no report line is rewritten on a terminal (an escape sequence, a
// carriage return, a newline forging a line, a bidirectional override).
func clean(s string) string { return safetext.Text(s) }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// WriteReportFile keeps r as JSON in path, owner-only, written whole by
// rename (a reader never sees half a report).
func WriteReportFile(path string, r Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return secretfile.Write(path, append(b, '\n'))
}

// ReadReportFile reads a report WriteReportFile kept, masked (Masked).
func ReadReportFile(path string) (Report, error) {
	var r Report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: not a reconciliation report: %w", path, err)
	}
	// A report kept before bank keys were masked is masked as it is read.
	return r.Masked(), nil
}
