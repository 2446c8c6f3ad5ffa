package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Lease and Retention used by the suite's guards.
const (
	Lease     = 30 * time.Second
	Retention = 72 * time.Hour
)

// Run runs the conformance suite. newStore is called once per subtest; it may
// return the same store every time (every subtest uses keys of its own).
func Run(t *testing.T, newStore func(t *testing.T) driver.Store) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			clock := NewClock(Epoch)
			g, err := idempotency.NewGuard(s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: clock, SkewMargin: -1})
			if err != nil {
				t.Fatalf("NewGuard: %v", err)
			}
			tc.run(t, &env{g: g, s: s, clock: clock, key: uniqueKey(t)})
		})
	}
	t.Run("Transitions", func(t *testing.T) { Transitions(t, newStore) })
}

type env struct {
	g     *idempotency.Guard
	s     driver.Store
	clock *Clock
	key   string
}

func (e *env) claim(t *testing.T, fp string, want idempotency.Outcome) idempotency.Claim {
	t.Helper()
	c, err := e.g.Claim(t.Context(), e.key, fp)
	if err != nil {
		t.Fatalf("Claim(%q): %v", e.key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim outcome = %v, want %v (record %+v)", c.Outcome, want, c.Record)
	}
	return c
}

func (e *env) get(t *testing.T) idempotency.Record {
	t.Helper()
	r, err := e.g.Get(t.Context(), e.key)
	if err != nil {
		t.Fatalf("Get(%q): %v", e.key, err)
	}
	return r
}

// fixedTokenGuard is a guard on the same store and clock whose every claim
// uses token: what an SDK retry of one claim request looks like.
func (e *env) fixedTokenGuard(t *testing.T, token string) *idempotency.Guard {
	t.Helper()
	g, err := idempotency.NewGuard(e.s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: e.clock, SkewMargin: -1,
		NewToken: func() (string, error) { return token, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func uniqueKey(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "storetest-" + hex.EncodeToString(b[:]) + "-" + t.Name()
}

func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

const (
	fpA = "fingerprint-A"
	fpB = "fingerprint-B"
)

var cases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"FreshClaim", func(t *testing.T, e *env) {
		start := e.clock.Now()
		c := e.claim(t, fpA, idempotency.Acquired)
		r := c.Record
		if r.Key != e.key || r.State != idempotency.StateInProgress || r.Attempt != 1 || r.Fingerprint != fpA || r.Token == "" {
			t.Fatalf("claimed record = %+v", r)
		}
		sameTime(t, "LeaseUntil", r.LeaseUntil, start.Add(Lease))
		sameTime(t, "ExpiresAt", r.ExpiresAt, start.Add(Retention))
		got := e.get(t)
		if got.Token != r.Token || got.State != idempotency.StateInProgress || got.Attempt != 1 || got.Fingerprint != fpA {
			t.Fatalf("Get after claim = %+v, want %+v", got, r)
		}
		sameTime(t, "stored LeaseUntil", got.LeaseUntil, start.Add(Lease))
		sameTime(t, "stored CreatedAt", got.CreatedAt, start)
		sameTime(t, "stored ExpiresAt", got.ExpiresAt, start.Add(Retention))
	}},
	{"GetMissing", func(t *testing.T, e *env) {
		_, err := e.g.Get(t.Context(), e.key)
		wantErr(t, "Get of a key never claimed", err, idempotency.ErrNotFound)
	}},
	{"DuplicateInProgressWhileLeaseLive", func(t *testing.T, e *env) {
		first := e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease - time.Millisecond)
		dup := e.claim(t, fpA, idempotency.DuplicateInProgress)
		if dup.Record.Token != first.Record.Token {
			t.Fatalf("duplicate saw token %q, want the owner's %q", dup.Record.Token, first.Record.Token)
		}
		sameTime(t, "duplicate's view of LeaseUntil", dup.Record.LeaseUntil, first.Record.LeaseUntil)
		if got := e.get(t); got.Token != first.Record.Token || got.Attempt != 1 {
			t.Fatalf("a failed claim changed the record: %+v", got)
		}
	}},
	{"DuplicateDone", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(time.Second)
		doneAt := e.clock.Now()
		if err := e.g.Complete(t.Context(), c.Lease(), "DEBITED", "ref-123"); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		// Long after the lease: a DONE record is never reclaimed.
		e.clock.Advance(10 * Lease)
		dup := e.claim(t, fpA, idempotency.DuplicateDone)
		if dup.Record.Status != "DEBITED" || dup.Record.Detail != "ref-123" {
			t.Fatalf("duplicate saw %+v, want status DEBITED detail ref-123", dup.Record)
		}
		got := e.get(t)
		if got.State != idempotency.StateDone || got.Status != "DEBITED" || got.Detail != "ref-123" || got.Token != c.Record.Token {
			t.Fatalf("record after Complete = %+v", got)
		}
		sameTime(t, "ExpiresAt after Complete", got.ExpiresAt, doneAt.Add(Retention))
	}},
	{"DuplicateFailed", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "account closed"); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		e.clock.Advance(10 * Lease)
		dup := e.claim(t, fpA, idempotency.DuplicateFailed)
		if dup.Record.State != idempotency.StateFailed || dup.Record.Detail != "account closed" {
			t.Fatalf("duplicate saw %+v", dup.Record)
		}
	}},
	{"ExpiredLeaseReclaim", func(t *testing.T, e *env) {
		start := e.clock.Now()
		first := e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease) // lease_until <= now: expired
		second := e.claim(t, fpA, idempotency.Reclaimed)
		r := second.Record
		if r.Attempt != 2 || r.Token == first.Record.Token || r.State != idempotency.StateInProgress {
			t.Fatalf("reclaimed record = %+v (first token %q)", r, first.Record.Token)
		}
		sameTime(t, "LeaseUntil after reclaim", r.LeaseUntil, e.clock.Now().Add(Lease))
		got := e.get(t)
		if got.Attempt != 2 || got.Token != r.Token {
			t.Fatalf("stored after reclaim = %+v", got)
		}
		sameTime(t, "CreatedAt kept across reclaim", got.CreatedAt, start)
		e.clock.Advance(Lease)
		third := e.claim(t, fpA, idempotency.Reclaimed)
		if third.Record.Attempt != 3 {
			t.Fatalf("third claim attempt = %d, want 3", third.Record.Attempt)
		}
	}},
	{"StaleWorkerIsFenced", func(t *testing.T, e *env) {
		stale := e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease + time.Second)
		owner := e.claim(t, fpA, idempotency.Reclaimed)
		ctx := t.Context()
		wantErr(t, "stale Complete", e.g.Complete(ctx, stale.Lease(), "DEBITED", "stale"), idempotency.ErrLeaseLost)
		wantErr(t, "stale Fail", e.g.Fail(ctx, stale.Lease(), "FAILED", "stale"), idempotency.ErrLeaseLost)
		_, err := e.g.Extend(ctx, stale.Lease())
		wantErr(t, "stale Extend", err, idempotency.ErrLeaseLost)
		got := e.get(t)
		if got.State != idempotency.StateInProgress || got.Token != owner.Record.Token || got.Status != "" {
			t.Fatalf("stale writes changed the record: %+v", got)
		}
		if err := e.g.Complete(ctx, owner.Lease(), "DEBITED", "owner"); err != nil {
			t.Fatalf("owner Complete: %v", err)
		}
		if got := e.get(t); got.State != idempotency.StateDone || got.Detail != "owner" {
			t.Fatalf("after owner Complete: %+v", got)
		}
	}},
	{"FinalStateIsFinal", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		ctx := t.Context()
		if err := e.g.Complete(ctx, c.Lease(), "DEBITED", "first"); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		// The same lease finishing again is a retried write that landed:
		// success, and the record keeps its first result.
		if err := e.g.Complete(ctx, c.Lease(), "DEBITED", "second"); err != nil {
			t.Fatalf("second Complete under the same lease: %v, want nil (a retry that landed)", err)
		}
		wantErr(t, "Fail after Complete", e.g.Fail(ctx, c.Lease(), "FAILED", "late"), idempotency.ErrLeaseLost)
		_, err := e.g.Extend(ctx, c.Lease())
		wantErr(t, "Extend after Complete", err, idempotency.ErrLeaseLost)
		if got := e.get(t); got.State != idempotency.StateDone || got.Detail != "first" {
			t.Fatalf("record changed after its final state: %+v", got)
		}
	}},
	{"FinishMissingKey", func(t *testing.T, e *env) {
		l := idempotency.Lease{Key: e.key, Token: "no-such-token"}
		wantErr(t, "Complete of a key never claimed", e.g.Complete(t.Context(), l, "DEBITED", ""), idempotency.ErrLeaseLost)
		if _, err := e.g.Get(t.Context(), e.key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("Complete created a record: err = %v", err)
		}
	}},
	{"ConflictingFingerprint", func(t *testing.T, e *env) {
		first := e.claim(t, fpA, idempotency.Acquired)
		e.claim(t, fpB, idempotency.Conflict) // lease live
		e.clock.Advance(Lease + time.Second)
		c := e.claim(t, fpB, idempotency.Conflict) // lease expired: still no takeover
		if c.Record.Fingerprint != fpA || c.Record.Token != first.Record.Token {
			t.Fatalf("conflict saw %+v", c.Record)
		}
		if got := e.get(t); got.Token != first.Record.Token || got.Fingerprint != fpA || got.Attempt != 1 {
			t.Fatalf("a conflicting claim changed the record: %+v", got)
		}
		owner := e.claim(t, fpA, idempotency.Reclaimed)
		if err := e.g.Complete(t.Context(), owner.Lease(), "DEBITED", ""); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		e.claim(t, fpB, idempotency.Conflict) // DONE with another payload
	}},
	{"RetentionExpiry", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(t.Context(), c.Lease(), "DEBITED", ""); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		e.clock.Advance(Retention - time.Millisecond)
		e.claim(t, fpA, idempotency.DuplicateDone)
		e.clock.Advance(time.Millisecond)
		if _, err := e.g.Get(t.Context(), e.key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("Get past retention: err = %v, want ErrNotFound", err)
		}
		fresh := e.claim(t, fpB, idempotency.Acquired)
		if fresh.Record.Attempt != 1 || fresh.Record.Fingerprint != fpB || fresh.Record.Status != "" {
			t.Fatalf("claim past retention = %+v, want a fresh record", fresh.Record)
		}
		got := e.get(t)
		if got.Attempt != 1 || got.Status != "" || got.Detail != "" || got.State != idempotency.StateInProgress {
			t.Fatalf("stored after claim past retention = %+v", got)
		}
		sameTime(t, "CreatedAt of the fresh record", got.CreatedAt, e.clock.Now())
	}},
	{"ExtendKeepsTheKey", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease / 2)
		l, err := e.g.Extend(t.Context(), c.Lease())
		if err != nil {
			t.Fatalf("Extend: %v", err)
		}
		sameTime(t, "extended lease", l.Until, e.clock.Now().Add(Lease))
		e.clock.Advance(Lease - time.Millisecond) // past the original lease, inside the extension
		e.claim(t, fpA, idempotency.DuplicateInProgress)
		sameTime(t, "stored LeaseUntil", e.get(t).LeaseUntil, l.Until)
		if err := e.g.Complete(t.Context(), l, "DEBITED", ""); err != nil {
			t.Fatalf("Complete after Extend: %v", err)
		}
	}},
	{"YieldLetsTheNextDeliveryReclaimAtOnce", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Yield(t.Context(), c.Lease()); err != nil {
			t.Fatalf("Yield: %v", err)
		}
		again := e.claim(t, fpA, idempotency.Reclaimed) // no clock advance
		if again.Record.Token == c.Record.Token || again.Record.Attempt != 2 {
			t.Fatalf("reclaim after Yield: %+v, want a new token and attempt 2", again.Record)
		}
		wantErr(t, "Complete with the yielded lease", e.g.Complete(t.Context(), c.Lease(), "DEBITED", ""), idempotency.ErrLeaseLost)
	}},
	{"FiftyConcurrentClaimsOneWinner", func(t *testing.T, e *env) {
		outcomes := race(t, e, 50)
		if outcomes[idempotency.Acquired] != 1 || outcomes[idempotency.DuplicateInProgress] != 49 {
			t.Fatalf("outcomes = %v, want 1 acquired and 49 duplicate_in_progress", outcomes)
		}
	}},
	{"FiftyConcurrentReclaimsOneWinner", func(t *testing.T, e *env) {
		e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease)
		outcomes := race(t, e, 50)
		if outcomes[idempotency.Reclaimed] != 1 || outcomes[idempotency.DuplicateInProgress] != 49 {
			t.Fatalf("outcomes = %v, want 1 reclaimed and 49 duplicate_in_progress", outcomes)
		}
		if got := e.get(t); got.Attempt != 2 {
			t.Fatalf("attempt after one reclaim = %d, want 2", got.Attempt)
		}
	}},
	{"StuckListsExpiredClaimsOldestFirst", func(t *testing.T, e *env) {
		sl, ok := e.s.(driver.StuckLister)
		if !ok {
			t.Skip("the store does not list stuck claims (optional)")
		}
		ctx := t.Context()
		claim := func(key string) idempotency.Claim {
			c, err := e.g.Claim(ctx, key, fpA)
			if err != nil || !c.Outcome.Owned() {
				t.Fatalf("claim %s: %v %v", key, c.Outcome, err)
			}
			return c
		}
		oldest := claim(e.key + "-a")
		e.clock.Advance(time.Second)
		newer := claim(e.key + "-b")
		done := claim(e.key + "-done")
		if err := e.g.Complete(ctx, done.Lease(), "DEBITED", ""); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(Lease) // a and b are past their lease
		live := claim(e.key + "-live")
		recs, total, err := sl.Stuck(ctx, e.clock.Now(), 1000)
		if err != nil {
			t.Fatalf("Stuck: %v", err)
		}
		var ours []string
		for _, r := range recs {
			if len(r.Key) > len(e.key) && r.Key[:len(e.key)] == e.key {
				ours = append(ours, r.Key)
			}
			if r.State != idempotency.StateInProgress || r.LeaseUntil.After(e.clock.Now()) {
				t.Errorf("listed a claim that is not stuck: %+v", r)
			}
		}
		if len(ours) != 2 || ours[0] != oldest.Record.Key || ours[1] != newer.Record.Key || total < 2 {
			t.Fatalf("stuck = %v (total %d), want [%s %s]; live %s and done must not be listed",
				ours, total, oldest.Record.Key, newer.Record.Key, live.Record.Key)
		}
		limited, total2, err := sl.Stuck(ctx, e.clock.Now(), 1)
		if err != nil || len(limited) != 1 || total2 != total {
			t.Fatalf("Stuck with limit 1: %d records, total %d (want %d), err %v", len(limited), total2, total, err)
		}
	}},
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
		if got := e.get(t); got.State != idempotency.StateDone || got.Attempt != 1 {
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
		for _, st := range []idempotency.State{idempotency.StateDone, idempotency.StateFailed} {
			key := e.key + "-" + string(st)
			c, err := e.g.Claim(t.Context(), key, fpA)
			if err != nil || c.Outcome != idempotency.Acquired {
				t.Fatalf("claim: %v %v", c.Outcome, err)
			}
			finish := e.g.Complete
			if st == idempotency.StateFailed {
				finish = e.g.Fail
			}
			for i := range 2 {
				if err := finish(t.Context(), c.Lease(), "S", "detail"); err != nil {
					t.Fatalf("%s finish %d: %v, want nil", st, i+1, err)
				}
			}
			other := e.g.Complete
			if st == idempotency.StateDone {
				other = e.g.Fail
			}
			wantErr(t, "finish to the other final state", other(t.Context(), c.Lease(), "X", "x"), idempotency.ErrLeaseLost)
			got, err := e.g.Get(t.Context(), key)
			if err != nil || got.State != st || got.Status != "S" || got.Detail != "detail" {
				t.Fatalf("record = %+v, %v", got, err)
			}
		}
	}},
	{"ReopenFailed", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "debit declined: UNAUTHORIZED"); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		e.clock.Advance(time.Hour)
		reopenedAt := e.clock.Now()
		r, err := e.g.Reopen(t.Context(), e.key, "gateway token fixed, INC-42", idempotency.ReopenOptions{})
		if err != nil {
			t.Fatalf("Reopen: %v", err)
		}
		if r.State != idempotency.StateInProgress || r.Attempt != 1 || r.Fingerprint != fpA || r.Status != "" || r.Detail != "" ||
			r.PrevStatus != "FAILED" || r.PrevDetail != "debit declined: UNAUTHORIZED" || r.Reopens != 1 ||
			r.ReopenReason != "gateway token fixed, INC-42" || r.Token == c.Record.Token || r.Token == "" {
			t.Fatalf("reopened record = %+v", r)
		}
		sameTime(t, "ReopenedAt", r.ReopenedAt, reopenedAt)
		sameTime(t, "ExpiresAt renewed", r.ExpiresAt, reopenedAt.Add(Retention))
		if got := e.get(t); got.Token != r.Token || got.State != idempotency.StateInProgress || got.Reopens != 1 || got.PrevDetail != r.PrevDetail {
			t.Fatalf("stored after Reopen = %+v", got)
		}
		// The old owner cannot write over it; a different payload is still a
		// conflict; the next delivery reclaims it at once.
		wantErr(t, "old lease Complete", e.g.Complete(t.Context(), c.Lease(), "DEBITED", "stale"), idempotency.ErrLeaseLost)
		e.claim(t, fpB, idempotency.Conflict)
		again := e.claim(t, fpA, idempotency.Reclaimed)
		if again.Record.Attempt != 2 {
			t.Fatalf("claim after reopen: attempt %d, want 2", again.Record.Attempt)
		}
		if err := e.g.Complete(t.Context(), again.Lease(), "DEBITED", "CBS1"); err != nil {
			t.Fatalf("Complete after reopen: %v", err)
		}
		got := e.get(t)
		if got.State != idempotency.StateDone || got.Detail != "CBS1" || got.Reopens != 1 || got.PrevStatus != "FAILED" ||
			got.ReopenReason != "gateway token fixed, INC-42" || !got.ReopenedAt.Equal(reopenedAt) {
			t.Fatalf("record after the reopened charge finished = %+v (the audit trail must stay)", got)
		}
	}},
	{"ReopenIntoANewGeneration", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if c.Record.Generation != 1 && c.Record.Generation != 0 {
			t.Fatalf("a fresh claim's generation %d, want 1", c.Record.Generation)
		}
		if got := e.get(t); got.Generation != 1 || len(got.History) != 0 {
			t.Fatalf("a fresh record: generation %d, history %q; want 1 and none", got.Generation, got.History)
		}
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "debit declined: INSUFFICIENT_FUNDS"); err != nil {
			t.Fatal(err)
		}
		refuse := errors.New("not a decline")
		_, err := e.g.Reopen(t.Context(), e.key, "funds arrived", idempotency.ReopenOptions{NewGeneration: true,
			Eligible: func(idempotency.Record) error { return refuse }})
		if !errors.Is(err, idempotency.ErrNotEligible) || !errors.Is(err, refuse) {
			t.Fatalf("a refused new generation: %v, want ErrNotEligible wrapping the rule's error", err)
		}
		if got := e.get(t); got.State != idempotency.StateFailed || got.Generation != 1 || got.Reopens != 0 {
			t.Fatalf("a refused new generation changed the record: %+v", got)
		}
		r, err := e.g.Reopen(t.Context(), e.key, "funds arrived", idempotency.ReopenOptions{NewGeneration: true, Operator: "ops-7",
			Eligible: func(r idempotency.Record) error { return nil }})
		if err != nil || r.Generation != 2 || len(r.History) != 1 ||
			!strings.Contains(r.History[0], "generation 1: FAILED debit declined: INSUFFICIENT_FUNDS") ||
			!strings.Contains(r.History[0], "ops-7") || !strings.Contains(r.History[0], "new generation 2") {
			t.Fatalf("reopened into a new generation: %+v %v", r, err)
		}
		// The claim and the work see the new generation; finishing keeps it.
		var seen int
		res, err := e.g.Do(t.Context(), e.key, fpA, func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
			seen = run.Generation
			return idempotency.Done{Status: "FAILED_AGAIN"}, fmt.Errorf("%w: declined again", idempotency.ErrPermanent)
		}, idempotency.DoOptions{})
		if seen != 2 || err != nil || res.Outcome != idempotency.Failed {
			t.Fatalf("Do after the reopen: generation %d (%v %v), want 2 and FAILED", seen, res, err)
		}
		if got := e.get(t); got.State != idempotency.StateFailed || got.Generation != 2 || len(got.History) != 1 {
			t.Fatalf("after generation 2 failed: %+v", got)
		}
		// A plain reopen keeps the generation and adds to the history.
		r, err = e.g.Reopen(t.Context(), e.key, "cause fixed", idempotency.ReopenOptions{})
		if err != nil || r.Generation != 2 || len(r.History) != 2 || !strings.Contains(r.History[1], "generation 2: FAILED") {
			t.Fatalf("a plain reopen of generation 2: %+v %v", r, err)
		}
		again := e.claim(t, fpA, idempotency.Reclaimed)
		if again.Record.Generation != 2 {
			t.Fatalf("reclaim after the plain reopen: generation %d, want 2", again.Record.Generation)
		}
		if err := e.g.Complete(t.Context(), again.Lease(), "DEBITED", "CBS9"); err != nil {
			t.Fatal(err)
		}
		if got := e.get(t); got.State != idempotency.StateDone || got.Generation != 2 || len(got.History) != 2 || got.History[0] != r.History[0] {
			t.Fatalf("DONE after two reopenings: %+v", got)
		}
		// Past retention the key starts again at generation 1.
		e.clock.Advance(Retention + time.Hour)
		fresh := e.claim(t, fpA, idempotency.Acquired)
		if fresh.Record.Generation > 1 {
			t.Fatalf("a claim past retention: generation %d", fresh.Record.Generation)
		}
		if got := e.get(t); got.Generation != 1 || len(got.History) != 0 || got.Reopens != 0 {
			t.Fatalf("a record taken over past retention keeps %d / %q / %d", got.Generation, got.History, got.Reopens)
		}
	}},
	{"ReopenIsConditionalOnTheRecordRead", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "first"); err != nil {
			t.Fatal(err)
		}
		stale := e.get(t).Token
		if _, err := e.g.Reopen(t.Context(), e.key, "once", idempotency.ReopenOptions{}); err != nil {
			t.Fatal(err)
		}
		again := e.claim(t, fpA, idempotency.Reclaimed)
		if err := e.g.Fail(t.Context(), again.Lease(), "FAILED", "second"); err != nil {
			t.Fatal(err)
		}
		// A reopen decided on the first FAILED record must not apply to the
		// second one.
		rec, err := e.s.Reopen(t.Context(), driver.ReopenRequest{Key: e.key, Token: "tok-stale", Reason: "stale", Now: e.clock.Now(),
			LeaseUntil: e.clock.Now(), ExpiresAt: e.clock.Now().Add(Retention), PrevToken: stale, Generation: 5, History: []string{"x"}})
		wantErr(t, "Reopen on a stale read", err, idempotency.ErrNotFailed)
		if rec.Detail != "second" {
			t.Fatalf("the refusal returned %+v, want the current record", rec)
		}
		if got := e.get(t); got.State != idempotency.StateFailed || got.Detail != "second" || got.Generation != 1 || got.Reopens != 1 {
			t.Fatalf("a reopen on a stale read changed the record: %+v", got)
		}
	}},
	{"AmendAndListByResult", func(t *testing.T, e *env) {
		am, ok := e.s.(driver.Amender)
		rl, ok2 := e.s.(driver.ResultLister)
		if !ok || !ok2 {
			t.Skip("the store does not amend results (optional)")
		}
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(t.Context(), c.Lease(), "DEBITED_NOTIFICATION_FAILED", "notice-1"); err != nil {
			t.Fatal(err)
		}
		other := e.key + "-other"
		oc, err := e.g.Claim(t.Context(), other, fpA)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.g.Complete(t.Context(), oc.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatal(err)
		}
		list, err := rl.ListByResult(t.Context(), idempotency.StateDone, "DEBITED_NOTIFICATION_FAILED", e.clock.Now(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, r := range list {
			if r.Key == other {
				t.Fatalf("ListByResult listed a record of another status: %+v", r)
			}
			if r.Key == e.key {
				found++
			}
		}
		if found != 1 {
			t.Fatalf("ListByResult found the record %d times in %d", found, len(list))
		}
		cur := e.get(t)
		e.clock.Advance(time.Minute)
		stale := []driver.AmendRequest{
			{Key: e.key, Token: "someone-else", FromStatus: "DEBITED_NOTIFICATION_FAILED", Status: "DEBITED", Now: e.clock.Now()},
			{Key: e.key, Token: cur.Token, FromStatus: "DEBITED", Status: "DEBITED", Now: e.clock.Now()},
		}
		for _, a := range stale {
			rec, err := am.Amend(t.Context(), a)
			wantErr(t, "Amend of a record not as read", err, idempotency.ErrStale)
			if rec.Status != "DEBITED_NOTIFICATION_FAILED" {
				t.Fatalf("the refusal returned %+v", rec)
			}
		}
		_, err = am.Amend(t.Context(), driver.AmendRequest{Key: e.key + "-none", Token: "x", Now: e.clock.Now()})
		wantErr(t, "Amend of a missing record", err, idempotency.ErrNotFound)
		rec, err := am.Amend(t.Context(), driver.AmendRequest{Key: e.key, Token: cur.Token, FromStatus: "DEBITED_NOTIFICATION_FAILED",
			Status: "DEBITED", Detail: "CBS7", History: []string{"renotified"}, Now: e.clock.Now()})
		if err != nil || rec.Status != "DEBITED" || rec.Detail != "CBS7" || len(rec.History) != 1 || rec.State != idempotency.StateDone {
			t.Fatalf("Amend: %+v %v", rec, err)
		}
		got := e.get(t)
		if got.Status != "DEBITED" || got.Detail != "CBS7" || len(got.History) != 1 || got.Token != cur.Token || got.Attempt != cur.Attempt {
			t.Fatalf("stored after Amend: %+v", got)
		}
		sameTime(t, "UpdatedAt", got.UpdatedAt, e.clock.Now())
		e.claim(t, fpA, idempotency.DuplicateDone)
	}},
	{"ReopenOnlyFailed", func(t *testing.T, e *env) {
		_, err := e.g.Reopen(t.Context(), e.key, "why", idempotency.ReopenOptions{})
		wantErr(t, "Reopen of a missing key", err, idempotency.ErrNotFound)
		c := e.claim(t, fpA, idempotency.Acquired)
		rec, err := e.g.Reopen(t.Context(), e.key, "why", idempotency.ReopenOptions{})
		wantErr(t, "Reopen of IN_PROGRESS", err, idempotency.ErrNotFailed)
		if rec.State != idempotency.StateInProgress {
			t.Fatalf("Reopen of IN_PROGRESS returned %+v, want the record", rec)
		}
		if err := e.g.Complete(t.Context(), c.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		rec, err = e.g.Reopen(t.Context(), e.key, "why", idempotency.ReopenOptions{})
		wantErr(t, "Reopen of DONE", err, idempotency.ErrNotFailed)
		if rec.State != idempotency.StateDone {
			t.Fatalf("Reopen of DONE returned %+v", rec)
		}
		if got := e.get(t); got.State != idempotency.StateDone || got.Detail != "ref" || got.Reopens != 0 || got.Token != c.Record.Token {
			t.Fatalf("a refused Reopen changed the record: %+v", got)
		}
	}},
	{"ClocksThatDisagreeWithinTheSkewMargin", func(t *testing.T, e *env) {
		// Two hosts share the store; B's clock runs 1.5 s ahead of A's.
		// With the default 2 s margin, B cannot take A's live lease.
		const skew = 1500 * time.Millisecond
		clockA, clockB := NewClock(Epoch), NewClock(Epoch.Add(skew))
		guard := func(c *Clock) *idempotency.Guard {
			g, err := idempotency.NewGuard(e.s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: c})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		a, b := guard(clockA), guard(clockB)
		claimA, err := a.Claim(t.Context(), e.key, fpA)
		if err != nil || claimA.Outcome != idempotency.Acquired {
			t.Fatalf("A's claim: %v %v", claimA.Outcome, err)
		}
		// On A's clock the lease has 1 ms left; B reads it as 1.5 s past.
		clockA.Advance(Lease - time.Millisecond)
		clockB.Advance(Lease - time.Millisecond)
		if c, err := b.Claim(t.Context(), e.key, fpA); err != nil || c.Outcome != idempotency.DuplicateInProgress {
			t.Fatalf("B, 1.5 s fast, while A's lease is live: %v %v, want duplicate_in_progress", c.Outcome, err)
		}
		if at := b.ReclaimableAt(claimA.Record.LeaseUntil); !at.Equal(claimA.Record.LeaseUntil.Add(idempotency.DefaultSkewMargin)) {
			t.Fatalf("ReclaimableAt = %v", at)
		}
		// Once the lease has passed by the margin on B's clock, B reclaims.
		clockB.Advance(idempotency.DefaultSkewMargin - skew + time.Millisecond)
		if c, err := b.Claim(t.Context(), e.key, fpA); err != nil || c.Outcome != idempotency.Reclaimed {
			t.Fatalf("B after the margin: %v %v, want reclaimed", c.Outcome, err)
		}
		// A yield (or a reopen) makes a key reclaimable at once for a guard
		// with the margin.
		key2 := e.key + "-yield"
		c2, err := a.Claim(t.Context(), key2, fpA)
		if err != nil || c2.Outcome != idempotency.Acquired {
			t.Fatal(c2.Outcome, err)
		}
		if err := a.Yield(t.Context(), c2.Lease()); err != nil {
			t.Fatal(err)
		}
		if c, err := a.Claim(t.Context(), key2, fpA); err != nil || c.Outcome != idempotency.Reclaimed {
			t.Fatalf("claim right after a yield: %v %v, want reclaimed", c.Outcome, err)
		}
	}},
	{"CountByStateCountsLiveRecords", func(t *testing.T, e *env) {
		sc, ok := e.s.(driver.StateCounter)
		if !ok {
			t.Skip("the store cannot count records by state cheaply (optional)")
		}
		ctx := t.Context()
		before, err := sc.CountByState(ctx, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		done := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(ctx, done.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatal(err)
		}
		failed, err := e.g.Claim(ctx, e.key+"-failed", fpA)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.g.Fail(ctx, failed.Lease(), "FAILED", "declined"); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := e.g.Claim(ctx, fmt.Sprintf("%s-busy-%d", e.key, i), fpA); err != nil {
				t.Fatal(err)
			}
		}
		after, err := sc.CountByState(ctx, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		for st, want := range map[idempotency.State]int{idempotency.StateDone: 1, idempotency.StateFailed: 1, idempotency.StateInProgress: 2} {
			if got := after[st] - before[st]; got != want {
				t.Errorf("%s: %d more, want %d (before %v, after %v)", st, got, want, before, after)
			}
		}
	}},
	{"PurgeDeletesOnlyRecordsPastRetention", func(t *testing.T, e *env) {
		p, ok := e.s.(driver.Purger)
		if !ok {
			t.Skip("the store expires records itself (optional)")
		}
		ctx := t.Context()
		old := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(ctx, old.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)
		young, err := e.g.Claim(ctx, e.key+"-young", fpA)
		if err != nil || !young.Outcome.Owned() {
			t.Fatal(young.Outcome, err)
		}
		e.clock.Advance(Retention - time.Hour) // the first is past retention, the second is not
		now := e.clock.Now()
		before, err := p.Expired(ctx, now)
		if err != nil || before < 1 {
			t.Fatalf("Expired = %d, %v; want at least the one record past retention", before, err)
		}
		total := 0
		for {
			n, err := p.Purge(ctx, now, 1)
			if err != nil {
				t.Fatalf("Purge: %v", err)
			}
			if n > 1 {
				t.Fatalf("Purge deleted %d records with limit 1", n)
			}
			if n == 0 {
				break
			}
			total += n
		}
		if after, err := p.Expired(ctx, now); err != nil || after != 0 || total != before {
			t.Fatalf("after purging: %d expired left, %d purged of %d (%v)", after, total, before, err)
		}
		if _, err := e.s.Get(ctx, e.key, time.Time{}); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("the expired record is still there: %v", err)
		}
		if r, err := e.g.Get(ctx, e.key+"-young"); err != nil || r.Token != young.Record.Token {
			t.Fatalf("Purge deleted a record inside its retention: %v", err)
		}
	}},
	{"OpaqueKeys", func(t *testing.T, e *env) {
		e.key += "/चार्ज #1 'quoted' \"and\" spaces"
		c := e.claim(t, fpA, idempotency.Acquired)
		if got := e.get(t); got.Key != e.key || got.Token != c.Record.Token {
			t.Fatalf("round trip of an unusual key: %+v", got)
		}
	}},
}

// race runs n claims on e.key at once and counts the outcomes. The winner's
// token must be the one stored.
func race(t *testing.T, e *env, n int) map[idempotency.Outcome]int {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[idempotency.Outcome]int{}
		winner   string
		start    = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			c, err := e.g.Claim(t.Context(), e.key, fpA)
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			outcomes[c.Outcome]++
			if c.Outcome.Owned() {
				winner = c.Record.Token
			}
		})
	}
	close(start)
	wg.Wait()
	if got := e.get(t); winner == "" || got.Token != winner {
		t.Fatalf("stored token %q, winner's token %q", got.Token, winner)
	}
	return outcomes
}
