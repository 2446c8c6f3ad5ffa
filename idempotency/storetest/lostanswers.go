package storetest

import (
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

var lostAnswersCases = []testCase{
	{"RetriedClaimThatLandedIsOurs", func(t *testing.T, e *env) {
		// The SDK retries a claim whose first write landed and whose answer
		// was lost: the retry finds the record under our own token.
		g := e.fixedTokenGuard(t, "token-retried-claim")
		first, err := g.Claim(t.Context(), e.key, fpA)
		if err != nil || first.Outcome != idempotency.Acquired {
			t.Fatalf("first claim: %v %v", first.Outcome, err)
		}
		again, err := g.Claim(t.Context(), e.key, fpA)
		if err != nil || again.Outcome != idempotency.Acquired {
			t.Fatalf("retried claim: %v %v, want acquired (our own record)", again.Outcome, err)
		}
		if again.Record.Attempt != 1 || again.Record.Token != "token-retried-claim" {
			t.Fatalf("retried claim record = %+v", again.Record)
		}
		// Anyone else still sees a claim in progress.
		e.claim(t, fpA, idempotency.DuplicateInProgress)
		if err := g.Complete(t.Context(), again.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatalf("Complete under the retried claim's lease: %v", err)
		}
		if got := e.get(t); got.State != driver.StateDone || got.Attempt != 1 {
			t.Fatalf("record = %+v", got)
		}
	}},
	{"RetriedReclaimThatLandedIsOurs", func(t *testing.T, e *env) {
		e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease)
		g := e.fixedTokenGuard(t, "token-retried-reclaim")
		for i := range 2 {
			c, err := g.Claim(t.Context(), e.key, fpA)
			if err != nil || c.Outcome != idempotency.Reclaimed || c.Record.Attempt != 2 {
				t.Fatalf("reclaim %d: %v attempt %d err %v, want reclaimed attempt 2", i+1, c.Outcome, c.Record.Attempt, err)
			}
		}
	}},
	{"RetriedFinishThatLandedSucceeds", func(t *testing.T, e *env) {
		for _, st := range []driver.State{driver.StateDone, driver.StateFailed} {
			key := e.key + "-" + string(st)
			c, err := e.g.Claim(t.Context(), key, fpA)
			if err != nil || c.Outcome != idempotency.Acquired {
				t.Fatalf("claim: %v %v", c.Outcome, err)
			}
			finish := e.g.Complete
			if st == driver.StateFailed {
				finish = e.g.Fail
			}
			for i := range 2 {
				if err := finish(t.Context(), c.Lease(), "S", "detail"); err != nil {
					t.Fatalf("%s finish %d: %v, want nil", st, i+1, err)
				}
			}
			other := e.g.Complete
			if st == driver.StateDone {
				other = e.g.Fail
			}
			wantErr(t, "finish to the other final state", other(t.Context(), c.Lease(), "X", "x"), idempotency.ErrLeaseLost)
			got, err := e.g.Get(t.Context(), key)
			if err != nil || got.State != st || got.Status != "S" || got.Detail != "detail" {
				t.Fatalf("record = %+v, %v", got, err)
			}
		}
	}},
}
