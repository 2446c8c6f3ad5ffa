package reconcile

import (
	"time"

	"github.com/finedge/idempotent-consumer/reconcile/statement"
)

// ReadFiles reads the statement files, in order, as one statement: every
// posting of ours goes to fn, and the period is the earliest From and the
// latest To the files say (zero when none says). The command line reads
// --statement this way, and the console the Statements of a kept report.
func ReadFiles(files []string, opts statement.Options) Postings {
	return func(fn func(statement.Posting) error) (statement.Period, error) {
		var period statement.Period
		for _, file := range files {
			h, err := statement.ReadFile(file, opts, fn)
			if err != nil {
				return period, err
			}
			if !h.Period.From.IsZero() && (period.From.IsZero() || h.Period.From.Before(period.From)) {
				period.From = h.Period.From
			}
			if h.Period.To.After(period.To) {
				period.To = h.Period.To
			}
		}
		return period, nil
	}
}

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
