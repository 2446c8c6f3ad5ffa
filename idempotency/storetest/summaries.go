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
			got := e.collected(t, co, driver.StateFailed, e.get(t))
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
		r := e.reopened(t, "customer disputes the decline", idempotency.ReopenOptions{})
		e.wantSummary(t, "reopen", r, sumA)
	}},
	{"KeptByAReopen", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateFailed, "FAILED")
		r := e.reopened(t, "customer disputes the decline", idempotency.ReopenOptions{})
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

// summaryAttackCases (attack 52s) are the writes Summaries' first cases
// leave out, each of which a store could write the record through without
// its summary: the Guard's own finish after a reclaim or a resume that
// carried none (DynamoDB writes that finish whole from the claimed
// record), a collect over a passed lease and over a WAITING record, an
// amend of a record finished DONE, a reopen into a new generation and the
// run that follows it.
var summaryAttackCases = []testCase{
	{"AGuardsReclaimWithoutOneKeepsItThroughItsFinish", func(t *testing.T, e *env) {
		e.claimSummary(t, sumA, true)
		e.clock.Advance(Lease + time.Second)
		e.doWithout(t, idempotency.Reclaimed)
		e.wantSummary(t, "a reclaim without a summary, finished DONE by the Guard", e.get(t), sumA)
	}},
	{"AGuardsResumeWithoutOneKeepsItThroughItsFinish", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateWaiting, "RETRY_SCHEDULED")
		e.clock.Advance(Lease + time.Second)
		e.doWithout(t, idempotency.Acquired)
		e.wantSummary(t, "the resume of a WAITING record without a summary, finished DONE by the Guard", e.get(t), sumA)
	}},
	{"KeptByACollectOverAPassedLease", func(t *testing.T, e *env) {
		co := capable[driver.Collector](t, e, "not a driver.Collector")
		c := e.claimSummary(t, sumA, true)
		e.clock.Advance(2 * Lease)
		got := e.collected(t, co, driver.StateInProgress, driver.Record{Token: c.Token, Generation: 1})
		e.wantSummary(t, "a collect over a passed lease", got, sumA)
	}},
	{"KeptByACollectOfAWaitingRecord", func(t *testing.T, e *env) {
		co := capable[driver.Collector](t, e, "not a driver.Collector")
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateWaiting, "RETRY_SCHEDULED")
		got := e.collected(t, co, driver.StateWaiting, e.get(t))
		e.wantSummary(t, "a collect of a WAITING record", got, sumA)
	}},
	{"KeptByAnAmendOfADoneRecord", func(t *testing.T, e *env) {
		am := capable[driver.Amender](t, e, "not a driver.Amender")
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateDone, "DEBITED_NOTIFICATION_FAILED")
		got, err := am.Amend(t.Context(), driver.AmendRequest{Key: e.key, Token: c.Token, FromStatus: "DEBITED_NOTIFICATION_FAILED",
			Status: "DEBITED", Detail: "renotified", History: []string{"renotified"}, Now: e.clock.Now()})
		if err != nil {
			t.Fatalf("Amend: %v", err)
		}
		e.wantSummary(t, "an amend of a DONE record", got, sumA)
	}},
	{"KeptByAReopenIntoANewGenerationAndItsRun", func(t *testing.T, e *env) {
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateFailed, "FAILED")
		r := e.reopened(t, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"})
		e.wantSummary(t, "a reopen into a new generation", r, sumA)
		e.clock.Advance(Lease + time.Second)
		e.doWithout(t, idempotency.Reclaimed)
		if r := e.get(t); r.Generation != 2 {
			t.Fatalf("after the run the record is at generation %d, want 2", r.Generation)
		}
		e.wantSummary(t, "the run of a reopened record, finished DONE by the Guard", e.get(t), sumA)
	}},
}

// doWithout runs the Guard's Do on e.key with no summary to DONE, wanting
// outcome.
func (e *env) doWithout(t *testing.T, outcome idempotency.Outcome) {
	t.Helper()
	res, err := e.g.Do(t.Context(), e.key, fpA, func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "DEBITED", Detail: "ref"}, nil
	}, idempotency.DoOptions{})
	if err != nil || res.Outcome != outcome {
		t.Fatalf("Do without a summary = %v, %v; want %v", res.Outcome, err, outcome)
	}
}

// collected collects e.key from state from with rec's token and
// generation to DEBITED (over a lease passed by now where from is
// IN_PROGRESS), and returns what the collect answered.
func (e *env) collected(t *testing.T, co driver.Collector, from driver.State, rec driver.Record) driver.Record {
	t.Helper()
	now := e.clock.Now()
	req := driver.CollectRequest{Key: e.key, From: from, Token: rec.Token, Generation: rec.Generation,
		NewToken: "collect-" + rec.Token, PostedGeneration: 1, Status: "DEBITED", Detail: "collected",
		History: []string{"collected"}, Now: now, ExpiresAt: now.Add(Retention)}
	if from == driver.StateInProgress {
		req.LeaseExpiredBy = now
	}
	got, err := co.Collect(t.Context(), req)
	if err != nil {
		t.Fatalf("Collect from %s: %v", from, err)
	}
	return got
}

// reopened reopens e.key through the Guard for reason with opts, and
// returns the reopened record.
func (e *env) reopened(t *testing.T, reason string, opts idempotency.ReopenOptions) driver.Record {
	t.Helper()
	r, err := e.g.Reopen(t.Context(), e.key, reason, opts)
	if err != nil {
		t.Fatalf("Reopen (%+v): %v", opts, err)
	}
	return r
}
