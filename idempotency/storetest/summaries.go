package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

const (
	sumA = "2500 INR 7890"
	sumB = "2600 INR 7890"
)

// claimSummary claims e.key for fpA with summary through the store, and
// checks what the claim answered.
func (e *env) claimSummary(t *testing.T, summary string, acquired bool) driver.Record {
	t.Helper()
	req, err := e.g.ClaimRequest(e.key, fpA)
	if err != nil {
		t.Fatal(err)
	}
	req.Summary = summary
	res, err := e.s.Claim(t.Context(), req)
	if err != nil {
		t.Fatalf("Claim with summary %q: %v", summary, err)
	}
	// Owned as the Guard counts it: a claim whose answer was lost and
	// that an SDK retry found landed (the record under its own token)
	// is acquired too.
	if owned := idempotency.ClaimOf(req, res).Outcome.Owned(); owned != acquired {
		t.Fatalf("Claim owned = %v, want %v (record %+v)", owned, acquired, res.Record)
	}
	return res.Record
}

// wantSummary checks the summary of what a write answered and of the
// record read afterwards.
func (e *env) wantSummary(t *testing.T, what string, answered driver.Record, want string) {
	t.Helper()
	if answered.Summary != want {
		t.Errorf("%s answered summary %q, want %q", what, answered.Summary, want)
	}
	if got := e.get(t).Summary; got != want {
		t.Errorf("after %s the record's summary is %q, want %q", what, got, want)
	}
}

// wantListed checks that recs, listed by what, hold e.key with summary
// want.
func (e *env) wantListed(t *testing.T, what string, recs []driver.Record, want string) {
	t.Helper()
	found := false
	for _, r := range recs {
		if r.Key == e.key {
			found = true
			if r.Summary != want {
				t.Errorf("%s lists the record with summary %q, want %q", what, r.Summary, want)
			}
		}
	}
	if !found {
		t.Errorf("%s does not list %s", what, e.key)
	}
}

// finishTo finishes the lease of rec into state.
func (e *env) finishTo(t *testing.T, rec driver.Record, state driver.State, status string) {
	t.Helper()
	now := e.clock.Now()
	f := driver.FinishRequest{Key: e.key, Token: rec.Token, State: state, Status: status, Detail: "d", Now: now,
		ExpiresAt: now.Add(Retention)}
	if state == driver.StateWaiting {
		f.NotBefore = now.Add(Lease)
	}
	if err := e.s.Finish(t.Context(), f); err != nil {
		t.Fatalf("Finish to %s: %v", state, err)
	}
}

var summaryCases = []testCase{
	{"DoWritesItAndItsDoneKeepsIt", func(t *testing.T, e *env) {
		// Through the Guard: its finish may write the record whole from
		// the claim (driver.FinishRequest.Claimed).
		res, err := e.g.Do(t.Context(), e.key, fpA, func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{Status: "DEBITED", Detail: "ref"}, nil
		}, idempotency.DoOptions{Summary: sumA})
		if err != nil || res.Outcome != idempotency.Acquired {
			t.Fatalf("Do = %v, %v; want acquired", res.Outcome, err)
		}
		if r := e.get(t); r.State != driver.StateDone || r.Summary != sumA {
			t.Fatalf("after Do the record is %s with summary %q, want DONE with %q", r.State, r.Summary, sumA)
		}
		_, err = e.g.Do(t.Context(), e.key, fpA, func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, nil
		}, idempotency.DoOptions{Summary: strings.Repeat("x", driver.MaxSummaryBytes+1)})
		if !errors.Is(err, idempotency.ErrInvalid) {
			t.Fatalf("Do with a summary past MaxSummaryBytes: err = %v, want ErrInvalid", err)
		}
	}},
	{"WrittenByTheClaimAndKeptByItsFinish", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.wantSummary(t, "the first claim", c, sumA)
		// A duplicate's claim, with another summary, writes nothing.
		dup := e.claimSummary(t, sumB, false)
		e.wantSummary(t, "a duplicate claim", dup, sumA)
		e.finishTo(t, c, driver.StateDone, "DEBITED")
		e.wantSummary(t, "finish DONE", e.get(t), sumA)
	}},
	{"AtMostMaxSummaryBytesKeptWhole", func(t *testing.T, e *env) {
		long := strings.Repeat("€", driver.MaxSummaryBytes/len("€"))
		long += strings.Repeat(".", driver.MaxSummaryBytes-len(long))
		c := e.claimSummary(t, long, true)
		e.wantSummary(t, "a claim with a summary of MaxSummaryBytes", c, long)
	}},
	{"AReclaimWithoutOneKeepsItWithOneReplacesIt", func(t *testing.T, e *env) {
		e.claimSummary(t, sumA, true)
		e.clock.Advance(Lease + time.Second)
		c := e.claim(t, fpA, idempotency.Reclaimed) // Guard.Claim: no summary
		e.wantSummary(t, "a reclaim without a summary", c.Record, sumA)
		e.clock.Advance(Lease + time.Second)
		r := e.claimSummary(t, sumB, true)
		e.wantSummary(t, "a reclaim with another summary", r, sumB)
	}},
	{"AnOlderRecordWithoutOneGetsItFromTheNextClaim", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		e.wantSummary(t, "a claim without a summary", c.Record, "")
		e.clock.Advance(Lease + time.Second)
		r := e.claimSummary(t, sumA, true)
		e.wantSummary(t, "the reclaim of a record without one", r, sumA)
	}},
	{"PastRetentionTheNewRecordStartsWithout", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateDone, "DEBITED")
		e.clock.Advance(Retention + time.Second)
		n := e.claim(t, fpA, idempotency.Acquired)
		e.wantSummary(t, "a claim without a summary over a record past retention", n.Record, "")
	}},
	{"KeptByAWaitAndItsResume", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateWaiting, "RETRY_SCHEDULED")
		e.wantSummary(t, "finish WAITING", e.get(t), sumA)
		e.clock.Advance(Lease + time.Second)
		r := e.claim(t, fpA, idempotency.Acquired)
		e.wantSummary(t, "the resume of a WAITING record", r.Record, sumA)
	}},
	{"KeptByExtendFailReopenAmendAndCollect", func(t *testing.T, e *env) {
		ctx := t.Context()
		c := e.claimSummary(t, sumA, true)
		l, err := e.g.Extend(ctx, idempotency.Lease{Key: e.key, Token: c.Token})
		if err != nil {
			t.Fatalf("Extend: %v", err)
		}
		e.wantSummary(t, "extend", e.get(t), sumA)
		e.finishTo(t, driver.Record{Token: l.Token}, driver.StateFailed, "FAILED")
		e.wantSummary(t, "finish FAILED", e.get(t), sumA)
		if co, ok := e.s.(driver.Collector); ok {
			failed := e.get(t)
			now := e.clock.Now()
			got, err := co.Collect(ctx, driver.CollectRequest{Key: e.key, From: driver.StateFailed, Token: failed.Token,
				Generation: failed.Generation, NewToken: "collect-" + failed.Token, PostedGeneration: 1, Status: "DEBITED",
				Detail: "collected", History: []string{"collected"}, Now: now, ExpiresAt: now.Add(Retention)})
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			e.wantSummary(t, "collect", got, sumA)
			if am, ok := e.s.(driver.Amender); ok {
				got, err := am.Amend(ctx, driver.AmendRequest{Key: e.key, Token: got.Token, FromStatus: "DEBITED", Status: "DEBITED",
					Detail: "amended", Now: e.clock.Now()})
				if err != nil {
					t.Fatalf("Amend: %v", err)
				}
				e.wantSummary(t, "amend", got, sumA)
			}
			return
		}
		r, err := e.g.Reopen(ctx, e.key, "customer disputes the decline", idempotency.ReopenOptions{})
		if err != nil {
			t.Fatalf("Reopen: %v", err)
		}
		e.wantSummary(t, "reopen", r, sumA)
	}},
	{"KeptByAReopen", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateFailed, "FAILED")
		r, err := e.g.Reopen(t.Context(), e.key, "customer disputes the decline", idempotency.ReopenOptions{})
		if err != nil {
			t.Fatalf("Reopen: %v", err)
		}
		e.wantSummary(t, "reopen", r, sumA)
		e.clock.Advance(Lease + time.Second)
		n := e.claim(t, fpA, idempotency.Reclaimed)
		e.wantSummary(t, "the claim after a reopen", n.Record, sumA)
	}},
	{"ListedWithIt", func(t *testing.T, e *env) {
		ctx := t.Context()
		c := e.claimSummary(t, sumA, true)
		if sl, ok := e.s.(driver.StuckLister); ok {
			at := e.clock.Now().Add(2 * Lease)
			stuck, _, err := sl.Stuck(ctx, at, 1000)
			if err != nil {
				t.Fatalf("Stuck: %v", err)
			}
			e.wantListed(t, "Stuck at "+at.String(), stuck, sumA)
		}
		e.finishTo(t, c, driver.StateFailed, "FAILED")
		if rl, ok := e.s.(driver.ResultLister); ok {
			recs, err := rl.ListByResult(ctx, driver.StateFailed, "FAILED", e.clock.Now(), 1000)
			if err != nil {
				t.Fatalf("ListByResult: %v", err)
			}
			e.wantListed(t, "ListByResult(FAILED)", recs, sumA)
		}
	}},
}
