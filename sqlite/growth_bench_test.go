package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// BenchmarkGrowth measures the claim on an idempotency table that already
// holds many records (performance round 2: five days at 2M a day is 10M),
// against a nearly empty one, in the same run, with FULL durability:
//
//	IC_GROWTH_RECORDS=10000000 IC_GROWTH_DIR=/var/tmp/growth IC_GROWTH_ROUNDS=3 \
//	  go test -run XXX -bench Growth -benchtime 20000x ./sqlite
//
// The big file is built once (about a minute per 5M records) and kept in
// IC_GROWTH_DIR between runs when that is set (default: a temp dir, built
// each run; default size 200,000; several sizes comma-separated, 10,000
// always first as the reference). storetest.Growth runs them, in turn
// IC_GROWTH_ROUNDS times: claims/s (fresh claim + DONE, 16 at a time, new
// keys), duplicate claims/s on existing keys (storetest.GrowthKey, in
// order, as real ids grow with time) drawn at random over the whole table
// (the worst case for the page cache), and the file's bytes per record.
func BenchmarkGrowth(b *testing.B) {
	dir := os.Getenv("IC_GROWTH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	var tables []storetest.GrowthTable
	for _, n := range storetest.GrowthSizes(b, "200000") {
		path := filepath.Join(dir, fmt.Sprintf("growth-%d.db", n))
		db := prefilled(b, path, n)
		b.Cleanup(func() { db.Close() })
		st, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		tables = append(tables, storetest.GrowthTable{N: n, Store: NewStore(db),
			Metrics: map[string]float64{"file-bytes/record": float64(st.Size()) / float64(n)}})
	}
	storetest.Growth(b, tables)
}

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
from seq`, n, storetest.GrowthFingerprint, now, now, now, now+retention)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.sql.ExecContext(b.Context(), `pragma wal_checkpoint(truncate)`); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d records in %s", n, time.Since(start).Round(time.Second))
	return db
}
