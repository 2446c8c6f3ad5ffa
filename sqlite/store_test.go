package sqlite_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/sqlite"
)

func TestConformance(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ic.db"), sqlite.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := sqlite.NewStore(db)
	storetest.Run(t, func(*testing.T) idempotency.Store { return s })
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
