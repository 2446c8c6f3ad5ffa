package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

func TestConformance(t *testing.T) {
	db := sqlitetest.Open(t, "ic.db", sqlite.OpenOptions{})
	s := sqlite.NewStore(db)
	storetest.Conformance(t, s)
}

// The same suite and histories with every claim written in a queue
// receive's transaction and every finish in the transaction that deletes
// its message (the co-located path): the same state machine, row by row.
func TestConformanceThroughTheQueue(t *testing.T) {
	db := sqlitetest.Open(t, "ic.db", sqlite.OpenOptions{})
	q, err := sqlite.NewQueue(db, sqlite.QueueOptions{Name: "claims", VisibilityTimeout: 12 * time.Hour,
		WaitTime: 5 * time.Millisecond, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.ConformanceThroughQueue(t, q, sqlite.NewStore(db))
}

// Several processes share one file: each has its own connection pool. The
// claim must still have exactly one winner.
func TestOneWinnerAcrossSeparateConnectionPools(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	var guards []*idempotency.Guard
	for range 5 {
		db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		g, err := idempotency.NewGuard(sqlite.NewStore(db), idempotency.Options{})
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	start := make(chan struct{})
	for i := range 50 {
		wg.Go(func() {
			<-start
			c, err := guards[i%len(guards)].Claim(t.Context(), "CHG-SHARED", "fp")
			if err != nil {
				t.Error(err)
				return
			}
			if c.Outcome.Owned() {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d winners across pools, want 1", won)
	}
}

func BenchmarkClaim(b *testing.B) {
	for _, sync := range []sqlite.Sync{sqlite.SyncFull, sqlite.SyncNormal} {
		b.Run(string(sync), func(b *testing.B) {
			db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.OpenOptions{Sync: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.SetParallelism(16) // group commit pays off with concurrent claimants
			storetest.Benchmark(b, sqlite.NewStore(db))
		})
	}
}

// Many writers share group commits while some of them are cancelled at
// random moments. Each caller must be told the true result of its own
// write: nil → its record is in the file under its token; an error → no
// record (its write never started). A cancellation must never undo another
// caller's write.
func TestCancelledCallersNeverPoisonAGroupCommit(t *testing.T) {
	db := sqlitetest.Open(t, "cancel.db", sqlite.OpenOptions{Sync: sqlite.SyncNormal})
	s := sqlite.NewStore(db)
	const n = 2000
	type told struct {
		token string
		err   error
	}
	results := make([]told, n)
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(7, 11))
	delays := make([]time.Duration, n)
	for i := range delays {
		if rng.IntN(2) == 0 {
			delays[i] = time.Duration(rng.IntN(3000)) * time.Microsecond
		} else {
			delays[i] = -1 // never cancelled
		}
	}
	now := time.Now().Truncate(time.Millisecond)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if d := delays[i]; d >= 0 {
				time.AfterFunc(d, cancel)
			}
			token := fmt.Sprintf("tok-%d", i)
			res, err := s.Claim(ctx, driver.ClaimRequest{
				Key: fmt.Sprintf("K-%d", i), Token: token, Fingerprint: "fp", Now: now,
				LeaseExpiredBy: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour),
			})
			if err == nil && !res.Acquired {
				err = fmt.Errorf("not acquired: %+v", res.Record)
			}
			results[i] = told{token, err}
		})
	}
	wg.Wait()
	var ok, cancelled int
	for i, r := range results {
		rec, gerr := s.Get(t.Context(), fmt.Sprintf("K-%d", i), now)
		switch {
		case r.err == nil:
			ok++
			if gerr != nil || rec.Token != r.token {
				t.Fatalf("writer %d was told its claim committed, but the file has %+v (%v)", i, rec, gerr)
			}
		case errors.Is(r.err, context.Canceled):
			cancelled++
			if !errors.Is(gerr, idempotency.ErrNotFound) {
				t.Fatalf("writer %d was told it was cancelled (%v), but its record is in the file: %+v", i, r.err, rec)
			}
		default:
			t.Fatalf("writer %d: unexpected error %v (a cancellation reached another caller's write?)", i, r.err)
		}
	}
	if ok == 0 || cancelled == 0 {
		t.Fatalf("committed %d, cancelled %d: the test needs both to prove anything", ok, cancelled)
	}
	t.Logf("%d committed, %d cancelled before their write started", ok, cancelled)
}
