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
