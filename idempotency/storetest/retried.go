package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// RetriedCharge is the work of a charge declined once and debited when
// resumed, for a store's own test of a wait (what it sends, what it keeps
// beside the record): the first run waits a day on Clock
// (RETRY_SCHEDULED, into generation 2, with a note), the second is
// DEBITED. Runs holds what each run was told.
type RetriedCharge struct {
	Clock *Clock
	Runs  []idempotency.Run
}

// Work is the charge's work for Guard.Do.
func (c *RetriedCharge) Work(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
	c.Runs = append(c.Runs, run)
	if len(c.Runs) == 1 {
		return idempotency.Done{}, &idempotency.Wait{Until: c.Clock.Now().Add(24 * time.Hour), Status: "RETRY_SCHEDULED",
			Detail: "after INSUFFICIENT_FUNDS", NextGeneration: true, Note: "generation 1: declined INSUFFICIENT_FUNDS"}
	}
	return idempotency.Done{Status: "DEBITED", Detail: "CBS1", Note: "generation 2: debited"}, nil
}

// Wait runs the first: the charge key waits.
func (c *RetriedCharge) Wait(t *testing.T, g *idempotency.Guard, key string) {
	t.Helper()
	if res, err := g.Do(t.Context(), key, "fp", c.Work, idempotency.DoOptions{}); err != nil || res.Outcome != idempotency.Waiting {
		t.Fatalf("Do = %+v, %v; want Waiting", res, err)
	}
}

// Listed checks a listing of WAITING records: only key's, as it waits.
func (c *RetriedCharge) Listed(t *testing.T, page driver.ListPage, err error, key string) {
	t.Helper()
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("ListState(WAITING) = %+v, %v", page, err)
	}
	if r := page.Records[0]; r.Key != key || r.Status != "RETRY_SCHEDULED" || r.Generation != 2 || len(r.History) != 1 ||
		!r.LeaseUntil.Equal(c.Clock.Now().Add(24*time.Hour)) {
		t.Fatalf("listed %+v, want the waiting record: its status, generation 2, one history line, its not-before", r)
	}
}

// Resume runs the second, once the clock has passed the wait: the claim
// is acquired on attempt 2.
func (c *RetriedCharge) Resume(t *testing.T, g *idempotency.Guard, key string) {
	t.Helper()
	res, err := g.Do(t.Context(), key, "fp", c.Work, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Acquired || res.Attempt != 2 {
		t.Fatalf("the resumed run: %+v, %v; want Acquired on attempt 2", res, err)
	}
}

// Debited checks what the resumed run was told (no reclaim, generation 2,
// the first note) and the record it left (DONE, two history lines).
func (c *RetriedCharge) Debited(t *testing.T, g *idempotency.Guard, key string) {
	t.Helper()
	if r := c.Runs[1]; r.Reclaimed || r.Generation != 2 || !slices.Equal(r.History, []string{"generation 1: declined INSUFFICIENT_FUNDS"}) {
		t.Fatalf("the resumed run was told %+v; want not reclaimed, generation 2, the first note", r)
	}
	rec, err := g.Get(t.Context(), key)
	if err != nil || rec.State != driver.StateDone || rec.Generation != 2 || len(rec.History) != 2 || rec.Attempt != 2 {
		t.Fatalf("final record %+v (%v), want DONE, generation 2, two history lines, attempt 2", rec, err)
	}
}
