package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// ReadFiles reads the statement files, in order, as one statement: every
// posting of ours goes to fn, and the period is the earliest From and the
// latest To the files say (zero when none says). Files whose periods leave
// a gap between them are refused (ErrGap): the days in the gap would have
// every charge finished in them reported as not posted. The command line
// reads --statement this way, and the console the Statements of a kept
// report. Reversals without a bank key are read too
// (statement.Options.UnkeyedReversals): Run pairs them by reference.
func ReadFiles(files []string, opts statement.Options) Postings {
	// A bank's own storno without our key is paired by Run by its
	// reference.
	opts.UnkeyedReversals = true
	return func(fn func(statement.Posting) error) (statement.Period, error) {
		var period statement.Period
		var said []statement.Period
		for i, file := range files {
			source := strconv.Itoa(i) + ":" + file
			h, err := statement.ReadFile(file, opts, func(p statement.Posting) error {
				p.File = source
				return fn(p)
			})
			if err != nil {
				return period, err
			}
			if h.Period.From.IsZero() || h.Period.To.IsZero() {
				continue
			}
			said = append(said, h.Period)
			if period.From.IsZero() || h.Period.From.Before(period.From) {
				period.From = h.Period.From
			}
			if h.Period.To.After(period.To) {
				period.To = h.Period.To
			}
		}
		slices.SortFunc(said, func(a, b statement.Period) int { return a.From.Compare(b.From) })
		end := time.Time{}
		for i, p := range said {
			if i > 0 && p.From.After(end) {
				return period, fmt.Errorf("%w: the statements cover up to %s and again from %s: give the statement of the days between, or reconcile each file alone",
					ErrGap, end.UTC().Format(time.RFC3339), p.From.UTC().Format(time.RFC3339))
			}
			if p.To.After(end) {
				end = p.To
			}
		}
		return period, nil
	}
}

// ErrGap: the statements given leave days between them unread.
var ErrGap = errors.New("reconcile: the statements' periods leave a gap")

// Span is the report's period as a statement.Period (zero when the report
// does not say, or says it badly).
func (r Report) Span() statement.Period {
	from, err1 := time.Parse(time.RFC3339, r.Period.From)
	to, err2 := time.Parse(time.RFC3339, r.Period.To)
	if err1 != nil || err2 != nil || !from.Before(to) {
		return statement.Period{}
	}
	return statement.Period{From: from, To: to}
}
