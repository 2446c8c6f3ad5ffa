package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

var claimsCases = []testCase{
	{"FreshClaim", func(t *testing.T, e *env) {
		start := e.clock.Now()
		c := e.claim(t, fpA, idempotency.Acquired)
		r := c.Record
		if r.Key != e.key || r.State != driver.StateInProgress || r.Attempt != 1 || r.Fingerprint != fpA || r.Token == "" {
			t.Fatalf("claimed record = %+v", r)
		}
		sameTime(t, "LeaseUntil", r.LeaseUntil, start.Add(Lease))
		sameTime(t, "ExpiresAt", r.ExpiresAt, start.Add(Retention))
		got := e.get(t)
		if got.Token != r.Token || got.State != driver.StateInProgress || got.Attempt != 1 || got.Fingerprint != fpA {
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
		if got.State != driver.StateDone || got.Status != "DEBITED" || got.Detail != "ref-123" || got.Token != c.Record.Token {
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
		if dup.Record.State != driver.StateFailed || dup.Record.Detail != "account closed" {
			t.Fatalf("duplicate saw %+v", dup.Record)
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
		if got.Attempt != 1 || got.Status != "" || got.Detail != "" || got.State != driver.StateInProgress {
			t.Fatalf("stored after claim past retention = %+v", got)
		}
		sameTime(t, "CreatedAt of the fresh record", got.CreatedAt, e.clock.Now())
	}},
	{"OpaqueKeys", func(t *testing.T, e *env) {
		e.key += "/चार्ज #1 'quoted' \"and\" spaces"
		c := e.claim(t, fpA, idempotency.Acquired)
		if got := e.get(t); got.Key != e.key || got.Token != c.Record.Token {
			t.Fatalf("round trip of an unusual key: %+v", got)
		}
	}},
}

var leasesCases = []testCase{
	{"ExpiredLeaseReclaim", func(t *testing.T, e *env) {
		start := e.clock.Now()
		first := e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease) // lease_until <= now: expired
		second := e.claim(t, fpA, idempotency.Reclaimed)
		r := second.Record
		if r.Attempt != 2 || r.Token == first.Record.Token || r.State != driver.StateInProgress {
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
		if got.State != driver.StateInProgress || got.Token != owner.Record.Token || got.Status != "" {
			t.Fatalf("stale writes changed the record: %+v", got)
		}
		if err := e.g.Complete(ctx, owner.Lease(), "DEBITED", "owner"); err != nil {
			t.Fatalf("owner Complete: %v", err)
		}
		if got := e.get(t); got.State != driver.StateDone || got.Detail != "owner" {
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
		if got := e.get(t); got.State != driver.StateDone || got.Detail != "first" {
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
}
