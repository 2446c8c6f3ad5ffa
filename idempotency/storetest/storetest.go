package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// Lease and Retention used by the suite's guards.
const (
	Lease     = 30 * time.Second
	Retention = 72 * time.Hour
)

// Run runs the conformance suite. newStore is called once per subtest; it may
// return the same store every time (every subtest uses keys of its own).
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			clock := NewClock(Epoch)
			g, err := idempotency.NewGuard(s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: clock})
			if err != nil {
				t.Fatalf("NewGuard: %v", err)
			}
			tc.run(t, &env{g: g, s: s, clock: clock, key: uniqueKey(t)})
		})
	}
}

type env struct {
	g     *idempotency.Guard
	s     idempotency.Store
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
		wantErr(t, "stale Release", e.g.Release(ctx, stale.Lease()), idempotency.ErrLeaseLost)
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
		wantErr(t, "second Complete", e.g.Complete(ctx, c.Lease(), "DEBITED", "second"), idempotency.ErrLeaseLost)
		wantErr(t, "Fail after Complete", e.g.Fail(ctx, c.Lease(), "FAILED", "late"), idempotency.ErrLeaseLost)
		_, err := e.g.Extend(ctx, c.Lease())
		wantErr(t, "Extend after Complete", err, idempotency.ErrLeaseLost)
		wantErr(t, "Release after Complete", e.g.Release(ctx, c.Lease()), idempotency.ErrLeaseLost)
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
	{"ReleaseFreesTheKey", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Release(t.Context(), c.Lease()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if _, err := e.g.Get(t.Context(), e.key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("Get after Release: err = %v, want ErrNotFound", err)
		}
		again := e.claim(t, fpA, idempotency.Acquired)
		if again.Record.Token == c.Record.Token {
			t.Fatal("a new claim reused the old token")
		}
		wantErr(t, "Complete with the released lease", e.g.Complete(t.Context(), c.Lease(), "DEBITED", ""), idempotency.ErrLeaseLost)
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
		sl, ok := e.s.(idempotency.StuckLister)
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
