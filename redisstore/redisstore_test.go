package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/redisstore"
)

func TestStoreConformance(t *testing.T) {
	c, prefix := dbtest.Redis(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, func(*testing.T) driver.Store { return s })
	// Concurrent histories with lost answers, checked by porcupine against the state machine.
	t.Run("Linearizable", func(t *testing.T) {
		storetest.Linearizable(t, func(*testing.T) driver.Store { return s }, storetest.LinearizableOptions{})
	})
}

// The key carries a TTL of the record's retention, computed from the
// claimant's clock: Redis deletes it then, whatever the server's clock.
func TestTheKeyExpiresAtRetention(t *testing.T) {
	c, prefix := dbtest.Redis(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
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
	c, prefix := dbtest.Redis(t)
	s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
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
