package operate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/queue"
)

// ListFlags are dlq list's flags: reason codes and charge ids
// (comma-separated; none: all), an age (0: any), and how many to show
// (default 100, oldest first).
type ListFlags struct {
	Codes, IDs string
	OlderThan  time.Duration
	Limit      int
	JSON       bool
}

// Bind defines the flags on f (--json is the operator commands' own).
func (l *ListFlags) Bind(f *cli.FlagSet) {
	f.String(&l.Codes, "reason", "", "", "only these reason codes, comma-separated")
	f.String(&l.IDs, "charge-id", "", "", "only these charge ids, comma-separated")
	f.Duration(&l.OlderThan, "older-than", "", 0, "only entries dead-lettered longer ago than this")
	f.Int(&l.Limit, "limit", "", 100, "show at most this many (oldest first)")
}

// Options checks the flags and says what to list at now.
func (l *ListFlags) Options(now time.Time) (ListOptions, error) {
	o := ListOptions{Now: now, Match: ChargeMatch(cli.SplitList(l.IDs))}
	var err error
	if o.Codes, err = ParseCodes(l.Codes); err != nil {
		return o, err
	}
	if l.Limit < 1 || l.OlderThan < 0 {
		return o, cli.Usagef("--limit must be at least 1 and --older-than not negative")
	}
	if l.OlderThan > 0 {
		o.Before = now.Add(-l.OlderThan)
	}
	return o, nil
}

// ListTo is dlq list: what o chooses on q, at most l.Limit entries
// printed on out (a table, or JSON with l.JSON) with the total; a listing
// that could not see every message is an error after it is printed, never
// a silent "0 DLQ entries".
func (l *ListFlags) ListTo(ctx context.Context, q queue.Operator, o ListOptions, out io.Writer) error {
	got, err := List(ctx, q, o)
	if err != nil {
		return err
	}
	entries := got.Entries[:min(l.Limit, len(got.Entries))]
	if l.JSON {
		if err := json.NewEncoder(out).Encode(ListJSON{Total: len(got.Entries), Entries: append([]Entry{}, entries...),
			Unseen: got.Unseen, UnseenApproximate: got.Approximate}); err != nil {
			return err
		}
	} else {
		PrintList(out, entries, len(got.Entries))
	}
	if note := got.Incomplete(); note != "" {
		return errors.New(note)
	}
	return nil
}
