package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Inspect is chargerecovery inspect: the record of charge id at now,
// printed for a person or as JSON; a missing record is an error that says
// what its absence can mean.
func Inspect(ctx context.Context, store driver.Store, id string, asJSON bool, now time.Time, out io.Writer) error {
	rec, err := store.Get(ctx, id, now)
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("no idempotency record for %s: never claimed, released after a transient failure, or past its retention", id)
	}
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(RecordJSONOf(rec, now))
	}
	PrintRecord(out, rec, now)
	return nil
}

// Stuck is chargerecovery stuck: at most limit claims IN_PROGRESS past
// their lease at now, oldest first, with their total. A store that cannot
// list them (named storeName in the error) is an error saying what to do
// instead.
func Stuck(ctx context.Context, store driver.Store, storeName string, limit int, asJSON bool, now time.Time, out io.Writer) error {
	sl, ok := store.(driver.StuckLister)
	if !ok {
		return fmt.Errorf("the %s store cannot list stuck claims (it would need a scan of every key); each is reclaimed by its next delivery, and inspect CHARGE_ID shows one", storeName)
	}
	recs, total, err := sl.Stuck(ctx, now, limit)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(StuckJSONOf(recs, total, now))
	}
	return PrintStuck(out, recs, total, now)
}

// Show is chargerecovery status: the report of s (Collect), printed for a
// person or as JSON; a backend that does not answer is an error.
func Show(ctx context.Context, s Sources, asJSON bool, out io.Writer) error {
	rep, err := Collect(ctx, s)
	if err != nil {
		return fmt.Errorf("backend unreachable: %w", err)
	}
	if asJSON {
		return json.NewEncoder(out).Encode(rep)
	}
	Print(out, rep)
	return nil
}
