package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// BenchmarkClaim runs the shared store benchmark and, on the same server in
// the same run, the floor: a raw SET of a key.
func BenchmarkClaim(b *testing.B) {
	s, c, prefix := newStore(b)
	storetest.Benchmark(b, s)
	var seq atomic.Int64
	raw := fmt.Sprintf("%sraw-%d-", prefix, time.Now().UnixNano())
	b.Run("RawSet", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := c.Set(b.Context(), raw+fmt.Sprint(seq.Add(1)), "x", time.Hour).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
