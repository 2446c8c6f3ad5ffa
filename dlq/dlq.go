// Package dlq holds what redriving a dead-letter queue means, independent
// of the queue: which entries may go back, and the report of a run.
package dlq

import (
	"strings"
	"time"
)

// Entry is one dead-lettered message as a redrive sees it.
type Entry struct {
	ID     string // id in the DLQ
	Reason string // the dead-letter reason ("" when the queue's own redrive policy moved it)
	// At is when the message was put on the DLQ (the embedded queue), or
	// when it was first sent (SQS keeps the original timestamp through its
	// redrive policy); zero when unknown.
	At time.Time
}

// Options select what a redrive moves.
type Options struct {
	// ReasonPrefix keeps only entries whose reason starts with it ("" keeps all).
	ReasonPrefix string
	// Max moves at most this many (0: no limit).
	Max int
	// DryRun counts what would move and moves nothing.
	DryRun bool
	// Force allows CONFLICT entries, and entries older than MaxAge, to
	// move. Without it they are held back: a charge id reused with another
	// payload needs a person, and redriving it only dead-letters it again.
	Force bool
	// MaxAge holds back entries older than this at Now (0: no limit): once
	// an entry is older than the idempotency record's retention, the record
	// that stops a second debit may be gone, and a redrive would claim the
	// charge afresh. Set it to the record retention minus a safety margin.
	MaxAge time.Duration
	Now    time.Time
}

// Decision for one entry.
type Decision int

// The decisions.
const (
	Skip     Decision = iota // does not match the filter, or over Max
	HoldBack                 // a conflict, without Force
	Move
	TooOld // older than MaxAge, without Force
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
	if o.MaxAge > 0 && !o.Force && !e.At.IsZero() && o.Now.Sub(e.At) > o.MaxAge {
		return TooOld
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
	TooOld   int            `json:"held_back_too_old"`
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
	case TooOld:
		r.TooOld++
	default:
		r.Skipped++
	}
}
