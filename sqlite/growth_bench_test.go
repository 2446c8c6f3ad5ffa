package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// BenchmarkGrowth measures the claim on an idempotency table that already
// holds many records (performance round 2: five days at 2M a day is 10M),
// against a nearly empty one, in the same run, with FULL durability:
//
//	IC_GROWTH_RECORDS=10000000 IC_GROWTH_DIR=/var/tmp/growth \
//	  go test -run XXX -bench Growth -benchtime 20000x -count 3 ./sqlite
//
// The big file is built once (about a minute per 5M records) and kept in
// IC_GROWTH_DIR between runs when that is set (default: a temp dir, built
// each run; default size 200,000). Existing keys are charge-like ids in
// order ("CHG-" and a 10-digit sequence), as real ids grow with time. It
// reports claims/s (fresh claim + DONE, 16 at a time, new keys), duplicate
// claims/s on existing keys drawn at random over the whole table (the
// worst case for the page cache), and the file's bytes per record.
func BenchmarkGrowth(b *testing.B) {
	big := 200_000
	if v := os.Getenv("IC_GROWTH_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("IC_GROWTH_RECORDS=%q: want a positive count", v)
		}
		big = n
	}
	dir := os.Getenv("IC_GROWTH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for _, n := range []int{10_000, big} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			path := filepath.Join(dir, fmt.Sprintf("growth-%d.db", n))
			db := prefilled(b, path, n)
			defer db.Close()
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			perRecord := float64(st.Size()) / float64(n)
			g, err := idempotency.NewGuard(NewStore(db), idempotency.Options{Lease: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			prefix := fmt.Sprintf("NEW-%d-", time.Now().UnixNano())
			var seq atomic.Int64
			b.Run("FreshClaimAndDone", func(b *testing.B) {
				b.SetParallelism(8) // 16 claimants on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						c, err := g.Claim(b.Context(), prefix+strconv.FormatInt(seq.Add(1), 10), "fp")
						if err == nil && c.Outcome == idempotency.Acquired {
							err = g.Complete(b.Context(), c.Lease(), "DEBITED", "CBS0000000001")
						} else if err == nil {
							err = fmt.Errorf("claim: %s", c.Outcome)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
				b.ReportMetric(perRecord, "file-bytes/record")
			})
			b.Run("DuplicateOfARandomRecord", func(b *testing.B) {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
					for pb.Next() {
						c, err := g.Claim(b.Context(), chargeKey(rng.IntN(n)), fingerprintOf(0))
						if err == nil && c.Outcome != idempotency.DuplicateDone {
							err = fmt.Errorf("claim of an existing record: %s", c.Outcome)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
			})
		})
	}
}

func chargeKey(i int) string { return fmt.Sprintf("CHG-%010d", i) }

// fingerprintOf is the prefilled records' fingerprint (one for all: the
// duplicate check reads it, its value does not matter).
func fingerprintOf(int) string { return fmt.Sprintf("%064x", 42) }

// prefilled opens the file at path holding n DONE records, building it
// inside SQLite (one statement, one transaction) when it does not exist.
func prefilled(b *testing.B, path string, n int) *DB {
	b.Helper()
	_, statErr := os.Stat(path)
	db, err := Open(context.Background(), path, OpenOptions{Sync: SyncFull})
	if err != nil {
		b.Fatal(err)
	}
	if statErr == nil {
		return db
	}
	start := time.Now()
	now := time.Now().UnixMilli()
	retention := (14 * 24 * time.Hour).Milliseconds()
	_, err = db.sql.ExecContext(b.Context(), `
with recursive seq(i) as (select 0 union all select i + 1 from seq where i + 1 < ?)
insert into idempotency_records
  (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
select printf('CHG-%010d', i), 'DONE', lower(hex(randomblob(16))), ?, 1, ?, ?, ?, ?, 'DEBITED', printf('CBS%010d', i)
from seq`, n, fingerprintOf(0), now, now, now, now+retention)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.sql.ExecContext(b.Context(), `pragma wal_checkpoint(truncate)`); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d records in %s", n, time.Since(start).Round(time.Second))
	return db
}
