package storetest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// GrowthTable is one size of a growth benchmark: a store holding N DONE
// records, keyed GrowthKey(0) … GrowthKey(N-1), each with
// GrowthFingerprint, prefilled by the store's own benchmark.
type GrowthTable struct {
	N     int
	Store driver.Store
	// Metrics are reported beside the fresh claims' rate (say,
	// "table-bytes/record"); nil: none.
	Metrics map[string]float64
	// FreshPrefix starts the fresh claims' keys (default:
	// GrowthFreshPrefix()); a store that keeps its prefilled records
	// between runs sets it to remove the fresh ones afterwards.
	FreshPrefix string
}

// GrowthKey is the i-th prefilled record's key: a charge-like id in
// order, as real ids grow with time.
func GrowthKey(i int) string { return fmt.Sprintf("CHG-%010d", i) }

// GrowthFingerprint is every prefilled record's fingerprint (a duplicate
// claim reads it; its value does not matter).
var GrowthFingerprint = fmt.Sprintf("%064x", 42)

// GrowthSizes is 10,000 (the reference, first) and then IC_GROWTH_RECORDS's
// sizes, comma-separated (default: def).
func GrowthSizes(b *testing.B, def string) []int {
	sizes := []int{10_000}
	v := cmp.Or(os.Getenv("IC_GROWTH_RECORDS"), def)
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("IC_GROWTH_RECORDS=%q: want positive counts, comma-separated", v)
		}
		if n != 10_000 {
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// Growth measures the claim at every size of tables, IC_GROWTH_ROUNDS
// times in turn (10k, big, 10k, big, …; default once), so each size's
// median comes from rounds interleaved in one run: claims/s of a fresh
// claim then DONE (16 at a time on 2 cores, new keys) and of a duplicate
// claim on an existing key drawn at random over the whole table (the
// worst case for a cache). Each store's BenchmarkGrowth prefills its
// tables and calls it.
func Growth(b *testing.B, tables []GrowthTable) {
	rounds := 1
	if v := os.Getenv("IC_GROWTH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("IC_GROWTH_ROUNDS=%q: want a positive count", v)
		}
		rounds = n
	}
	type size struct {
		GrowthTable
		g      *idempotency.Guard
		prefix string
		seq    atomic.Int64
	}
	sizes := make([]*size, len(tables))
	for i, t := range tables {
		g, err := idempotency.NewGuard(t.Store, idempotency.Options{Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		sizes[i] = &size{GrowthTable: t, g: g, prefix: cmp.Or(t.FreshPrefix, GrowthFreshPrefix())}
	}
	for range rounds {
		for _, t := range sizes {
			b.Run(fmt.Sprintf("records=%d", t.N), func(b *testing.B) {
				b.Run("FreshClaimAndDone", func(b *testing.B) {
					b.SetParallelism(8) // 16 claimants on 2 cores
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							c, err := t.g.Claim(b.Context(), t.prefix+strconv.FormatInt(t.seq.Add(1), 10), "fp")
							if err == nil && c.Outcome == idempotency.Acquired {
								err = t.g.Complete(b.Context(), c.Lease(), "DEBITED", "CBS0000000001")
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
					for unit, v := range t.Metrics {
						b.ReportMetric(v, unit)
					}
				})
				b.Run("DuplicateOfARandomRecord", func(b *testing.B) {
					b.SetParallelism(8)
					b.RunParallel(func(pb *testing.PB) {
						rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
						for pb.Next() {
							c, err := t.g.Claim(b.Context(), GrowthKey(rng.IntN(t.N)), GrowthFingerprint)
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
}

// GrowthFreshPrefix is the prefix of the fresh claims' keys of one run
// ("NEW-<ns>-"): they sort after every prefilled key.
func GrowthFreshPrefix() string { return fmt.Sprintf("NEW-%d-", time.Now().UnixNano()) }
