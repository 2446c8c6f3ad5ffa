package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Benchmark measures the claim on a store, the same way for every store:
// a fresh claim alone (one store call, to set against the store's raw
// single write), a fresh claim then DONE (a charge's first delivery: two
// store calls), and a duplicate claim (a key already DONE: one store
// call). Run it from each store's own benchmark.
func Benchmark(b *testing.B, s driver.Store) {
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	b.Run("FreshClaim", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c, err := g.Claim(b.Context(), prefix+fmt.Sprint(seq.Add(1)), "fp")
				if err != nil || c.Outcome != idempotency.Acquired {
					b.Errorf("claim: %v %v", c.Outcome, err)
					return
				}
			}
		})
	})
	b.Run("FreshClaimAndComplete", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := prefix + fmt.Sprint(seq.Add(1))
				c, err := g.Claim(b.Context(), key, "fp")
				if err != nil || c.Outcome != idempotency.Acquired {
					b.Errorf("claim: %v %v", c.Outcome, err) // Fatal may not run off the benchmark's goroutine
					return
				}
				if err := g.Complete(b.Context(), c.Lease(), "DEBITED", "ref"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	done := prefix + "done"
	c, err := g.Claim(b.Context(), done, "fp")
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Complete(b.Context(), c.Lease(), "DEBITED", "ref"); err != nil {
		b.Fatal(err)
	}
	b.Run("DuplicateClaim", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c, err := g.Claim(b.Context(), done, "fp")
				if err != nil || c.Outcome != idempotency.DuplicateDone {
					b.Errorf("claim: %v %v", c.Outcome, err)
					return
				}
			}
		})
	})
}
