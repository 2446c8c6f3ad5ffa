package postgres_test

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/internal/testenv"
	"github.com/finedge/idempotent-consumer/postgres"
)

// BenchmarkGrowth measures the claim on an idempotency table that already
// holds many records (performance round 4: growth on every backend),
// against a nearly empty one, in the same run — sqlite's BenchmarkGrowth
// on PostgreSQL:
//
//	IC_GROWTH_RECORDS=1000000,10000000 IC_GROWTH_SCHEMA=ic_growth IC_GROWTH_ROUNDS=3 \
//	  go test -run XXX -bench Growth -benchtime 5000x -timeout 2h ./postgres
//
// IC_GROWTH_RECORDS is the big size, or several, comma-separated (default
// 200,000); 10,000 always runs first, as the reference. Each size has a
// schema of its own, filled in the server by one INSERT … SELECT
// generate_series (about a minute per million records here, then VACUUM
// ANALYZE: the table as a server with autovacuum would have it) and kept
// between runs, named IC_GROWTH_SCHEMA_<size>, when IC_GROWTH_SCHEMA is set
// (default: the test's own schemas, built each run and dropped).
// IC_GROWTH_ROUNDS runs the sizes in turn that many times (10k, big, 10k,
// big, …), so each size's median comes from rounds interleaved in one run.
// Existing keys are charge-like ids in order ("CHG-" and a 10-digit
// sequence), as real ids grow with time. It reports claims/s (fresh claim +
// DONE, 16 at a time, new keys), duplicate claims/s on existing keys drawn
// at random over the whole table (the worst case for the buffer cache),
// and the table's bytes per record (heap, indexes and TOAST). Only the
// store's public API is measured; the seeding writes the columns of the
// first migration and leaves the rest to their defaults.
func BenchmarkGrowth(b *testing.B) {
	keep := os.Getenv("IC_GROWTH_SCHEMA")
	if keep != "" && !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(keep) {
		b.Fatalf("IC_GROWTH_SCHEMA=%q: want a plain lower-case identifier", keep)
	}
	var tables []storetest.GrowthTable
	for _, n := range storetest.GrowthSizes(b, "200000") {
		schema := keep + "_" + strconv.Itoa(n)
		if keep == "" {
			schema = dbtest.Schema(b)
		}
		db := prefilledPostgres(b, schema, n)
		var bytes int64
		if err := db.Pool().QueryRow(b.Context(), `select pg_total_relation_size('idempotency_records')`).Scan(&bytes); err != nil {
			b.Fatal(err)
		}
		tables = append(tables, storetest.GrowthTable{N: n, Store: postgres.NewStore(db),
			Metrics: map[string]float64{"table-bytes/record": float64(bytes) / float64(n)}})
	}
	storetest.Growth(b, tables)
}

// prefilledPostgres opens schema holding n DONE records, filling it in the
// server (one statement) unless it already holds them.
func prefilledPostgres(b *testing.B, schema string, n int) *postgres.DB {
	b.Helper()
	ctx := b.Context()
	open, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	db, err := postgres.Open(open, dbtest.PostgresURL(), postgres.Options{Schema: schema})
	if err != nil {
		testenv.Unreachable(b, "PostgreSQL at "+dbtest.PostgresURL()+" unreachable ("+err.Error()+"); start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start (or set "+dbtest.PostgresEnv+")")
	}
	b.Cleanup(db.Close)
	var have int
	if err := db.Pool().QueryRow(ctx, `select count(*) from idempotency_records where key like 'CHG-%'`).Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have == n {
		return db
	}
	if have != 0 {
		b.Fatalf("schema %s holds %d seeded records, not %d: drop it (drop schema %s cascade)", schema, have, n, schema)
	}
	start := time.Now()
	if _, err := db.Pool().Exec(ctx, `
insert into idempotency_records
  (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
select 'CHG-' || lpad(i::text, 10, '0'), 'DONE', md5(i::text), $2, 1, now(), now(), now(), now() + interval '14 days',
  'DEBITED', 'CBS' || lpad(i::text, 10, '0')
from generate_series(0, $1 - 1) i`, n, storetest.GrowthFingerprint); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool().Exec(ctx, `vacuum analyze idempotency_records`); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d records in schema %s in %s", n, schema, time.Since(start).Round(time.Second))
	return db
}
