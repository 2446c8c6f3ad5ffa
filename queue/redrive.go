package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DLQEntry is one dead-lettered message as a redrive sees it.
type DLQEntry struct {
	ID     string // id on the DLQ
	Reason Reason
	// At is when the message was put on the DLQ (embedded and in-memory
	// queues), or when it was first sent (SQS keeps the original timestamp
	// through its redrive policy); zero when unknown.
	At time.Time
	// Body and Attributes are the message as dead-lettered (Body nil where
	// it is over MaxMessageBytes and was not read).
	Body       []byte
	Attributes map[string]string
	// SourceID is the message's id on the queue it came from (a forward
	// repeated after a lost answer leaves two entries with one SourceID);
	// ReceiveCount how often it was received there. Zero values where the
	// queue's own redrive policy moved it.
	SourceID     string
	ReceiveCount int
	// TooLarge: the body is over MaxMessageBytes and was not read; the
	// entry can only be purged, never moved back.
	TooLarge bool
	// Size is the body's length in bytes where the queue reports it
	// without reading the body (always for a TooLarge entry; 0: unknown).
	Size int
}

// EntryOf reads a DLQ message: its reason, source id and receive count
// from the dead-letter attributes.
func EntryOf(id string, body []byte, attrs map[string]string, at time.Time) DLQEntry {
	e := DLQEntry{ID: id, Reason: ReasonFromAttributes(attrs), At: at, Body: body, Attributes: attrs, SourceID: attrs[SourceIDAttribute]}
	e.ReceiveCount, _ = strconv.Atoi(attrs[ReceiveCountAttribute])
	return e
}

// RedriveOptions select what a redrive moves.
type RedriveOptions struct {
	// Codes keeps only entries with one of these codes (none: all).
	Codes []Code
	// Max moves at most this many (0: no limit).
	Max int
	// DryRun counts what would move and moves nothing.
	DryRun bool
	// HoldBack are codes that move only with Force: for a charge id reused
	// with another payload ("conflict") a person must decide, and a redrive
	// would only dead-letter it again.
	HoldBack []Code
	// Force moves HoldBack entries and entries older than MaxAge too.
	Force bool
	// MaxAge holds back entries older than this at Now (0: no limit): once
	// an entry is older than the idempotency record's retention, the record
	// that stops a second debit may be gone, and a redrive would claim the
	// charge afresh. Set it to the record retention minus a safety margin.
	MaxAge time.Duration
	Now    time.Time
	// Before, when set, leaves entries dead-lettered after it alone: not
	// moved, not counted (Later). A redrive sets it to its start, so that
	// a message dead-lettered again while it runs is not moved again.
	Before time.Time
	// Match, when set, keeps only entries it accepts (e.g. by charge id).
	Match func(DLQEntry) bool
	// Visit, when set, sees every counted entry with its decision (a
	// listing is a dry run that visits), before it is moved.
	Visit func(DLQEntry, RedriveDecision)
	// Moved, when set, sees every entry once it is back on the queue (not
	// one that was gone meanwhile): what an audit line names.
	Moved func(DLQEntry)
}

// RedriveDecision is what a redrive does with one entry.
type RedriveDecision int

// The decisions.
const (
	Skip     RedriveDecision = iota // does not match the filter, or over Max
	HoldBack                        // a HoldBack code, without Force
	Move
	TooOld // older than MaxAge, without Force
	Later  // dead-lettered after Before: neither moved nor counted
	// Unmovable would move but cannot: its body is over the size limit
	// (TooLarge), so it can only be purged.
	Unmovable
)

// Decide says what to do with e, given how many were already moved.
func (o RedriveOptions) Decide(e DLQEntry, moved int) RedriveDecision {
	if !o.Before.IsZero() && e.At.After(o.Before) {
		return Later
	}
	d := o.decide(e, moved)
	if o.Visit != nil {
		o.Visit(e, d)
	}
	return d
}

func (o RedriveOptions) decide(e DLQEntry, moved int) RedriveDecision {
	if len(o.Codes) > 0 && !slices.Contains(o.Codes, e.Reason.Code) {
		return Skip
	}
	if o.Match != nil && !o.Match(e) {
		return Skip
	}
	if slices.Contains(o.HoldBack, e.Reason.Code) && !o.Force {
		return HoldBack
	}
	if o.MaxAge > 0 && !o.Force && !e.At.IsZero() && o.Now.Sub(e.At) > o.MaxAge {
		return TooOld
	}
	if o.Max > 0 && moved >= o.Max {
		return Skip
	}
	if e.TooLarge {
		return Unmovable
	}
	return Move
}

// RedriveReport is what a redrive did (or, dry, would do).
type RedriveReport struct {
	Seen     int          `json:"seen"`
	Moved    int          `json:"moved"`
	HeldBack int          `json:"held_back"`
	TooOld   int          `json:"held_back_too_old"`
	Skipped  int          `json:"skipped"`
	DryRun   bool         `json:"dry_run"`
	ByCode   map[Code]int `json:"moved_by_code"`
	// SeenByCode counts every entry seen, moved or not.
	SeenByCode map[Code]int `json:"seen_by_code"`
	// Unmovable counts the entries chosen that cannot be moved (over the
	// size limit: purge them), and UnmovableIDs names up to 100 of them.
	Unmovable int `json:"unmovable_too_large"`
	// Gone counts the entries chosen that had left the DLQ when their turn
	// came (ErrGone: moved by another redrive, purged, expired): neither
	// moved nor counted as seen.
	Gone         int      `json:"gone_meanwhile,omitempty"`
	UnmovableIDs []string `json:"unmovable_ids,omitempty"`
	// Unseen is how many DLQ messages the run could not see (SQS: held
	// invisible by another reader for longer than the run waited); they
	// were neither counted nor moved. Approximate says the count is the
	// queue's estimate (SQS), not an exact one.
	Unseen      int  `json:"unseen,omitempty"`
	Approximate bool `json:"unseen_approximate,omitempty"`
}

// Count records the decision for e.
func (r *RedriveReport) Count(e DLQEntry, d RedriveDecision) {
	if d == Later {
		return
	}
	r.Seen++
	if r.SeenByCode == nil {
		r.SeenByCode = map[Code]int{}
	}
	r.SeenByCode[e.Reason.Code]++
	switch d {
	case Move:
		r.Moved++
		if r.ByCode == nil {
			r.ByCode = map[Code]int{}
		}
		r.ByCode[e.Reason.Code]++
	case HoldBack:
		r.HeldBack++
	case TooOld:
		r.TooOld++
	case Unmovable:
		r.Unmovable++
		if len(r.UnmovableIDs) < 100 {
			r.UnmovableIDs = append(r.UnmovableIDs, e.ID)
		}
	default:
		r.Skipped++
	}
}

// DLQScan is a queue driver's part of a redrive: its dead-letter entries a
// page at a time, and the move of one of them back to the queue. Redrive
// runs the rest — the decision per entry, Before, Max, the dry run, the
// report — once for every queue.
type DLQScan interface {
	// Next returns the next page of entries (oldest first where the queue
	// keeps an order); none when the DLQ has nothing more to show.
	Next(ctx context.Context) ([]DLQEntry, error)
	// MoveBack puts e (from Next) back on the queue with attrs, its
	// original attributes, and deletes it from the DLQ — in one step where
	// the queue allows it; ErrGone when e is no longer on the DLQ (then
	// nothing is put on the queue).
	MoveBack(ctx context.Context, e DLQEntry, attrs map[string]string) error
	// Close releases what the scan holds (SQS: makes the entries it
	// received and did not move visible again).
	Close()
}

// PartialScan is a DLQScan that may end without having seen every entry
// (SQS: entries another reader holds invisible).
type PartialScan interface {
	DLQScan
	// Unseen is, once Next has returned no more, how many entries the scan
	// could not see, and whether that count is approximate.
	Unseen() (n int, approximate bool)
}

// Redrive moves the entries of scan that o decides to move back to their
// queue, with their body and original attributes (the dead-letter ones
// dropped), and reports what it saw (and, for a PartialScan, how many it
// could not see). It stops at the first failed move; the scan is closed
// on every path. An entry over the size limit is never moved: it is
// counted (Unmovable) and the others go on; a redrive that is not a dry
// run and chose such entries moves the rest and then says so
// (ErrTooLarge, naming them). A dry run (a listing, a status) reads them
// as entries like any other.
func Redrive(ctx context.Context, scan DLQScan, o RedriveOptions) (RedriveReport, error) {
	defer scan.Close()
	rep := RedriveReport{DryRun: o.DryRun}
	for {
		page, err := scan.Next(ctx)
		if err != nil {
			return rep, err
		}
		if len(page) == 0 {
			if ps, ok := scan.(PartialScan); ok {
				n, approx := ps.Unseen()
				rep.Unseen, rep.Approximate = n, approx && n > 0
			}
			if rep.Unmovable > 0 && !o.DryRun {
				return rep, unmovable(rep)
			}
			return rep, nil
		}
		for _, e := range page {
			d := o.Decide(e, rep.Moved)
			if d == Move && !o.DryRun {
				err := scan.MoveBack(ctx, e, OriginalAttributes(e.Attributes))
				if errors.Is(err, ErrGone) {
					rep.Gone++ // not moved, and no reason to stop
					continue
				}
				if err != nil && !errors.Is(err, ErrSentNotDeleted) {
					return rep, err
				}
				if o.Moved != nil {
					o.Moved(e)
				}
				if err != nil { // it is on the queue: counted, then the run stops
					rep.Count(e, d)
					return rep, err
				}
			}
			rep.Count(e, d)
		}
	}
}

// unmovable is the error of a redrive that chose entries over the size
// limit.
func unmovable(rep RedriveReport) error {
	ids := strings.Join(rep.UnmovableIDs, ", ")
	if rep.Unmovable > len(rep.UnmovableIDs) {
		ids += ", …"
	}
	return fmt.Errorf("queue: redrive: %w: %d DLQ entries were not moved (%s): they can only be purged", ErrTooLarge, rep.Unmovable, ids)
}
