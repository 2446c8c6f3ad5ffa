package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/redisstore"
)

// newStore is a store on the test Redis under a key prefix of the test's
// own, with its client and prefix.
func newStore(t testing.TB) (*redisstore.Store, *redis.Client, string) {
	t.Helper()
	c, prefix := dbtest.Redis(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, prefix
}

func TestStoreConformance(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.Conformance(t, s)
}

// The key carries a TTL of the record's retention, computed from the
// claimant's clock: Redis deletes it then, whatever the server's clock.
func TestTheKeyExpiresAtRetention(t *testing.T) {
	s, c, prefix := newStore(t)
	clock := storetest.NewClock(storetest.Epoch.Add(-400 * 24 * time.Hour)) // a claimant clock far from the server's
	g, err := idempotency.NewGuard(s, idempotency.Options{Clock: clock, Retention: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), "CHG-TTL", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Complete(t.Context(), cl.Lease(), "DEBITED", "ref"); err != nil {
		t.Fatal(err)
	}
	got, err := c.PTTL(t.Context(), prefix+"CHG-TTL").Result()
	if err != nil || got < 47*time.Hour || got > 48*time.Hour {
		t.Fatalf("TTL %v (%v), want about 48h", got, err)
	}
}

// A listing walks every key under the prefix: another program's key there
// (not a hash) is skipped, and a search's glob characters match only
// themselves.
func TestListStateSkipsKeysThatAreNotRecords(t *testing.T) {
	s, c, prefix := newStore(t)
	ctx := t.Context()
	if err := c.Set(ctx, prefix+"CHG-STRING", "not a record", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(s, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(ctx, "CHG-1", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(ctx, cl.Lease(), "FAILED", "declined"); err != nil {
		t.Fatal(err)
	}
	p, err := s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Prefix: "CHG-", Now: time.Now()})
	if err != nil || len(p.Records) != 1 || p.Records[0].Key != "CHG-1" {
		t.Fatalf("ListState = %+v, %v", p, err)
	}
	p, err = s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Prefix: "CHG-*", Now: time.Now()})
	if err != nil || len(p.Records) != 0 {
		t.Fatalf("a search for CHG-* listed %+v, %v", p, err)
	}
	// Past the bound, the listing says to narrow the search.
	old := redisstore.MaxListScan
	redisstore.MaxListScan = 0
	defer func() { redisstore.MaxListScan = old }()
	if _, err := s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Prefix: "CHG-", Now: time.Now()}); !errors.Is(err, driver.ErrNotIndexed) || !strings.Contains(err.Error(), "longer charge-id prefix") {
		t.Fatalf("past the bound: %v", err)
	}
}

// scripts counts the scripts run (EVALSHA, or EVAL after NOSCRIPT: one
// round trip that counts, the first time a script runs on a server).
type scripts struct {
	mu sync.Mutex
	n  int
}

func (s *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && (err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT")) {
			s.mu.Lock()
			s.n++
			s.mu.Unlock()
		}
		return err
	}
}

func (s *scripts) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	s.n = 0
	return n
}

// A charge that waits (a declined debit retried in 24 hours) is listed and
// walked as WAITING, its key lives past its not-before, and its resume is
// not a reclaim and carries the generation and the history on; the claim,
// the wait, the resume and the finish are one script each.
func TestAWaitingChargeIsListedAndResumed(t *testing.T) {
	c, prefix := dbtest.Redis(t)
	count := &scripts{}
	c.AddHook(count)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	charge := &storetest.RetriedCharge{Clock: clock}
	charge.Wait(t, g, "CHG-W")
	if n := count.take(); n != 2 {
		t.Fatalf("claim and wait ran %d scripts, want 2", n)
	}
	if got, err := c.PTTL(ctx, prefix+"CHG-W").Result(); err != nil || got <= 24*time.Hour {
		t.Fatalf("TTL %v (%v), want past the not-before (24h)", got, err)
	}
	page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateWaiting, Prefix: "CHG-", Limit: 10, Now: clock.Now()})
	charge.Listed(t, page, err, "CHG-W")
	var walked []string
	if err := s.WalkUpdated(ctx, driver.WalkRequest{State: driver.StateWaiting, From: clock.Now().Add(-time.Hour), To: clock.Now().Add(time.Hour), Now: clock.Now()},
		func(r driver.Record) error { walked = append(walked, r.Key); return nil }); err != nil || !slices.Equal(walked, []string{"CHG-W"}) {
		t.Fatalf("WalkUpdated(WAITING) = %v, %v", walked, err)
	}

	clock.Advance(24 * time.Hour)
	count.take()
	charge.Resume(t, g, "CHG-W")
	if n := count.take(); n != 2 {
		t.Fatalf("resume and finish ran %d scripts, want 2", n)
	}
	charge.Debited(t, g, "CHG-W")
}

// A finish to WAITING sets the not-before and the status, and the
// generation and history when given (storetest.FinishToWaiting).
func TestAFinishToWaitingWritesItsFields(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.FinishToWaiting(t, s, nil)
}
