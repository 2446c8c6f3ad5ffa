// Package dlq holds what redriving a dead-letter queue means, independent
// of the queue: which entries may go back, and the report of a run.
package dlq

import "strings"

// Entry is one dead-lettered message as a redrive sees it.
type Entry struct {
	ID     string // id in the DLQ
	Reason string // the dead-letter reason ("" when the queue's own redrive policy moved it)
}

// Options select what a redrive moves.
type Options struct {
	// ReasonPrefix keeps only entries whose reason starts with it ("" keeps all).
	ReasonPrefix string
	// Max moves at most this many (0: no limit).
	Max int
	// DryRun counts what would move and moves nothing.
	DryRun bool
	// Force allows CONFLICT entries to move. Without it they are held
	// back: a charge id reused with another payload needs a person, and
	// redriving it only dead-letters it again.
	Force bool
}

// Decision for one entry.
type Decision int

// The decisions.
const (
	Skip     Decision = iota // does not match the filter, or over Max
	HoldBack                 // a conflict, without Force
	Move
)

// ConflictPrefix starts the reason of a conflict.
const ConflictPrefix = "conflict"

// Decide says what to do with e, given how many were already moved.
func (o Options) Decide(e Entry, moved int) Decision {
	if !strings.HasPrefix(e.Reason, o.ReasonPrefix) {
		return Skip
	}
	if strings.HasPrefix(e.Reason, ConflictPrefix) && !o.Force {
		return HoldBack
	}
	if o.Max > 0 && moved >= o.Max {
		return Skip
	}
	return Move
}

// Report is what a redrive did (or, dry, would do).
type Report struct {
	Seen     int            `json:"seen"`
	Moved    int            `json:"moved"`
	HeldBack int            `json:"held_back_conflicts"`
	Skipped  int            `json:"skipped"`
	DryRun   bool           `json:"dry_run"`
	ByReason map[string]int `json:"moved_by_reason"`
}

// Count records the decision for e.
func (r *Report) Count(e Entry, d Decision) {
	r.Seen++
	switch d {
	case Move:
		r.Moved++
		if r.ByReason == nil {
			r.ByReason = map[string]int{}
		}
		code, _, _ := strings.Cut(e.Reason, ":")
		if code == "" {
			code = "(queue redrive policy)"
		}
		r.ByReason[code]++
	case HoldBack:
		r.HeldBack++
	default:
		r.Skipped++
	}
}
