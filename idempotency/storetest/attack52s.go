package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

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
		co, ok := e.s.(driver.Collector)
		if !ok {
			t.Skip("not a driver.Collector")
		}
		c := e.claimSummary(t, sumA, true)
		e.clock.Advance(2 * Lease)
		now := e.clock.Now()
		got, err := co.Collect(t.Context(), driver.CollectRequest{Key: e.key, From: driver.StateInProgress, Token: c.Token, Generation: 1,
			LeaseExpiredBy: now, NewToken: "collect-" + c.Token, PostedGeneration: 1, Status: "DEBITED", Detail: "collected",
			History: []string{"collected"}, Now: now, ExpiresAt: now.Add(Retention)})
		if err != nil {
			t.Fatalf("Collect from IN_PROGRESS: %v", err)
		}
		e.wantSummary(t, "a collect over a passed lease", got, sumA)
	}},
	{"KeptByACollectOfAWaitingRecord", func(t *testing.T, e *env) {
		co, ok := e.s.(driver.Collector)
		if !ok {
			t.Skip("not a driver.Collector")
		}
		c := e.claimSummary(t, sumA, true)
		e.finishTo(t, c, driver.StateWaiting, "RETRY_SCHEDULED")
		w := e.get(t)
		now := e.clock.Now()
		got, err := co.Collect(t.Context(), driver.CollectRequest{Key: e.key, From: driver.StateWaiting, Token: w.Token, Generation: w.Generation,
			NewToken: "collect-" + w.Token, PostedGeneration: 1, Status: "DEBITED", Detail: "collected",
			History: []string{"collected"}, Now: now, ExpiresAt: now.Add(Retention)})
		if err != nil {
			t.Fatalf("Collect from WAITING: %v", err)
		}
		e.wantSummary(t, "a collect of a WAITING record", got, sumA)
	}},
	{"KeptByAnAmendOfADoneRecord", func(t *testing.T, e *env) {
		am, ok := e.s.(driver.Amender)
		if !ok {
			t.Skip("not a driver.Amender")
		}
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
		r, err := e.g.Reopen(t.Context(), e.key, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"})
		if err != nil {
			t.Fatalf("Reopen into a new generation: %v", err)
		}
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
