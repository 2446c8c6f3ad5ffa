// Package attack50 attacks issue 50's collect on every real store.
package attack50

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/redisstore"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

type collectStore interface {
	driver.Store
	driver.Collector
}

var stores = map[string]func(t *testing.T) collectStore{
	"memory": func(*testing.T) collectStore { return memstore.New() },
	"sqlite": func(t *testing.T) collectStore {
		db := sqlitetest.Open(t, "ic.db", sqlite.OpenOptions{})
		return sqlite.NewStore(db)
	},
	"postgres": func(t *testing.T) collectStore { return postgres.NewStore(pgtest.Open(t)) },
	"redis": func(t *testing.T) collectStore {
		c, prefix := dbtest.Redis(t)
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
	"dynamodb": func(t *testing.T) collectStore {
		client := dynamodb.NewFromConfig(awstest.Config(t))
		table := awstest.Name("a50")
		if err := awsdynamodb.CreateTable(t.Context(), client, table); err != nil {
			t.Fatal(err)
		}
		s, err := awsdynamodb.New(client, table)
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
}

var t0 = storetest.Epoch

// claimed is key IN_PROGRESS under token, its lease until leaseUntil.
func claimed(t *testing.T, s collectStore, key, token string, now, leaseUntil time.Time) {
	t.Helper()
	res, err := s.Claim(t.Context(), driver.ClaimRequest{Key: key, Token: token, Fingerprint: "fp", Now: now,
		LeaseExpiredBy: now, LeaseUntil: leaseUntil, ExpiresAt: now.Add(30 * 24 * time.Hour)})
	if err != nil || !res.Acquired {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
}

func failed(t *testing.T, s collectStore, key, token string) driver.Record {
	t.Helper()
	claimed(t, s, key, token, t0, t0.Add(time.Minute))
	if err := s.Finish(t.Context(), driver.FinishRequest{Key: key, Token: token, State: driver.StateFailed, Status: "FAILED",
		Detail: "debit declined: INSUFFICIENT_FUNDS", Now: t0, ExpiresAt: t0.Add(30 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(t.Context(), key, t0)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// onEachStore runs test on each store, a subtest each.
func onEachStore(t *testing.T, test func(t *testing.T, s collectStore)) {
	t.Helper()
	for name, open := range stores {
		t.Run(name, func(t *testing.T) { test(t, open(t)) })
	}
}

func collect(rec driver.Record, newToken string, now time.Time) driver.CollectRequest {
	return driver.CollectRequest{Key: rec.Key, From: rec.State, Token: rec.Token, Generation: max(rec.Generation, 1),
		LeaseExpiredBy: now.Add(-5 * time.Second), NewToken: newToken, PostedGeneration: max(rec.Generation, 1),
		Status: "DEBITED", Detail: "REF", History: []string{"adopted"}, Now: now, ExpiresAt: now.Add(30 * 24 * time.Hour)}
}

// Several operators collect the same FAILED record at once, each under
// its own token: exactly one lands; the others are ErrStale; the record
// is the winner's.
func TestAttack50ConcurrentCollectsOneWins(t *testing.T) {
	onEachStore(t, func(t *testing.T, s collectStore) {
		for round := range 10 {
			key := fmt.Sprintf("A50C-%d", round)
			rec := failed(t, s, key, "tok-"+key)
			const n = 8
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					_, errs[i] = s.Collect(t.Context(), collect(rec, fmt.Sprintf("new-%d", i), t0.Add(time.Second)))
				})
			}
			wg.Wait()
			won := -1
			for i, err := range errs {
				switch {
				case err == nil && won >= 0:
					t.Fatalf("%s: collects %d and %d both landed", key, won, i)
				case err == nil:
					won = i
				case !errors.Is(err, driver.ErrStale):
					t.Fatalf("%s: collect %d: %v; want ErrStale", key, i, err)
				}
			}
			got, _ := s.Get(t.Context(), key, t0.Add(time.Second))
			if won < 0 || got.State != driver.StateDone || got.Token != fmt.Sprintf("new-%d", won) {
				t.Fatalf("%s: winner %d, record %s under %s", key, won, got.State, got.Token)
			}
		}
	})
}

// A collect of an IN_PROGRESS record whose lease passed races a
// delivery's reclaim of it: exactly one of them takes the record.
func TestAttack50CollectRacesReclaim(t *testing.T) {
	onEachStore(t, func(t *testing.T, s collectStore) {
		for round := range 20 {
			key := fmt.Sprintf("A50R-%d", round)
			claimed(t, s, key, "tok-"+key, t0, t0.Add(time.Minute))
			now := t0.Add(time.Hour)
			rec, _ := s.Get(t.Context(), key, now)
			var cerr error
			var cres driver.ClaimResult
			var wg sync.WaitGroup
			wg.Go(func() { _, cerr = s.Collect(t.Context(), collect(rec, "collected", now)) })
			wg.Go(func() {
				cres, _ = s.Claim(t.Context(), driver.ClaimRequest{Key: key, Token: "delivery", Fingerprint: "fp", Now: now,
					LeaseExpiredBy: now.Add(-5 * time.Second), LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(24 * time.Hour)})
			})
			wg.Wait()
			got, _ := s.Get(t.Context(), key, now)
			switch {
			case cerr == nil && cres.Acquired:
				t.Fatalf("%s: the collect landed AND the delivery reclaimed (record %s under %s)", key, got.State, got.Token)
			case cerr != nil && !cres.Acquired:
				t.Fatalf("%s: neither: collect %v, claim %+v", key, cerr, cres)
			case cerr == nil && (got.State != driver.StateDone || got.Token != "collected"):
				t.Fatalf("%s: collect said landed, record %s under %s", key, got.State, got.Token)
			}
		}
	})
}

// A collect keeps what the record was: attempt, fingerprint, created-at,
// reopen audit fields.
func TestAttack50CollectKeepsTheRecordsFields(t *testing.T) {
	onEachStore(t, func(t *testing.T, s collectStore) {
		rec := failed(t, s, "A50K", "tok-k")
		got, err := s.Collect(t.Context(), collect(rec, "new", t0.Add(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		read, _ := s.Get(t.Context(), "A50K", t0.Add(time.Second))
		for _, r := range []driver.Record{got, read} {
			if r.Attempt != rec.Attempt || r.Fingerprint != rec.Fingerprint || !r.CreatedAt.Equal(rec.CreatedAt) || r.Reopens != rec.Reopens {
				t.Fatalf("collected %+v\nfrom %+v", r, rec)
			}
		}
	})
}

// A collect of an IN_PROGRESS record whose lease passed races its slow
// (not dead) worker's heartbeat: never both (the worker would go on
// debiting a record recorded as collected).
func TestAttack50CollectRacesHeartbeat(t *testing.T) {
	onEachStore(t, func(t *testing.T, s collectStore) {
		for round := range 20 {
			key := fmt.Sprintf("A50H-%d", round)
			claimed(t, s, key, "worker", t0, t0.Add(time.Minute))
			now := t0.Add(time.Hour)
			rec, _ := s.Get(t.Context(), key, now)
			var cerr, eerr error
			var wg sync.WaitGroup
			wg.Go(func() { _, cerr = s.Collect(t.Context(), collect(rec, "collected", now)) })
			wg.Go(func() {
				eerr = s.Extend(t.Context(), driver.ExtendRequest{Key: key, Token: "worker", LeaseUntil: now.Add(time.Minute), Now: now})
			})
			wg.Wait()
			if cerr == nil && eerr == nil {
				t.Fatalf("%s: the collect landed AND the worker's heartbeat was accepted", key)
			}
		}
	})
}
