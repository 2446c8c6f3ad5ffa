package postgres_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// BenchmarkClaim runs the shared store benchmark, and beside it, on the same
// server in the same run, the floor: a raw single-row INSERT of a key into a
// table with a primary key (what any "record it once" scheme costs).
func BenchmarkClaim(b *testing.B) {
	db := pgtest.Open(b)
	storetest.Benchmark(b, postgres.NewStore(db))
	if _, err := db.Pool().Exec(b.Context(), `create table raw_insert (key text primary key, v text not null)`); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	prefix := fmt.Sprintf("raw-%d-", time.Now().UnixNano())
	b.Run("RawInsert", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := db.Pool().Exec(b.Context(), `insert into raw_insert (key, v) values ($1, 'x')`, prefix+fmt.Sprint(seq.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
