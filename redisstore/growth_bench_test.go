package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/internal/testenv"
	"github.com/finedge/idempotent-consumer/redisstore"
)

// BenchmarkGrowth measures the claim on a Redis holding many records
// (performance round 4: growth on every backend), against a nearly empty
// keyspace, in the same run — sqlite's BenchmarkGrowth on the Redis store:
//
//	IC_GROWTH_REDIS_URL=redis://127.0.0.1:6379/9 IC_GROWTH_RECORDS=1000000,10000000 \
//	  IC_GROWTH_PREFIX=ic-growth IC_GROWTH_ROUNDS=3 \
//	  go test -run XXX -bench Growth -benchtime 20000x -timeout 2h ./redisstore
//
// IC_GROWTH_RECORDS is the big size, or several, comma-separated (default
// 200,000); 10,000 always runs first, as the reference. Each size has a
// key prefix of its own (IC_GROWTH_PREFIX-<size>: when IC_GROWTH_PREFIX is
// set, the records are kept between runs; else a test prefix, its keys
// unlinked at the end), filled with pipelined HSET + PEXPIRE in the
// store's layout (one hash per record, the fields its scripts write, a TTL
// at the retention). Run it on a database of its own
// (IC_GROWTH_REDIS_URL, default the test server): 10M records are a few
// GB, and other programs' SCANs of the same database would walk them.
// IC_GROWTH_ROUNDS runs the sizes in turn that many times (10k, big, 10k,
// big, …), so each size's median comes from rounds interleaved in one run.
// Existing keys are charge-like ids in order ("CHG-" and a 10-digit
// sequence). It reports claims/s (fresh claim + DONE, 16 at a time, new
// keys), duplicate claims/s on existing keys drawn at random over the
// whole keyspace, and the server's bytes per record (MEMORY USAGE of 200
// records drawn at random).
func BenchmarkGrowth(b *testing.B) {
	sizes := growthSizes(b)
	rounds := 1
	if v := os.Getenv("IC_GROWTH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("IC_GROWTH_ROUNDS=%q: want a positive count", v)
		}
		rounds = n
	}
	url := os.Getenv("IC_GROWTH_REDIS_URL")
	if url == "" {
		url = dbtest.RedisURL()
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatalf("IC_GROWTH_REDIS_URL: %v", err)
	}
	opts.PoolSize = 32
	c := redis.NewClient(opts)
	b.Cleanup(func() { c.Close() })
	ping, cancel := context.WithTimeout(b.Context(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ping).Err(); err != nil {
		testenv.Unreachable(b, "Redis at "+url+" unreachable ("+err.Error()+"); start it with: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save \"\" --appendonly no (or set IC_GROWTH_REDIS_URL)")
	}
	keep := os.Getenv("IC_GROWTH_PREFIX")
	type keyspace struct {
		n         int
		g         *idempotency.Guard
		perRecord float64
		prefix    string
		seq       atomic.Int64
	}
	spaces := make([]*keyspace, len(sizes))
	for i, n := range sizes {
		prefix := keep + "-" + strconv.Itoa(n) + ":"
		if keep == "" {
			prefix = dbtest.Name("ic-growth-") + ":"
			b.Cleanup(func() { unlinkPrefix(c, prefix) })
		}
		prefillRedis(b, c, prefix, n)
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		var bytes int64
		for range 200 {
			m, err := c.MemoryUsage(b.Context(), prefix+growthKey(rand.IntN(n))).Result()
			if err != nil {
				b.Fatal(err)
			}
			bytes += m
		}
		spaces[i] = &keyspace{n: n, g: g, perRecord: float64(bytes) / 200, prefix: fmt.Sprintf("NEW-%d-", time.Now().UnixNano())}
		if keep != "" {
			// The fresh claims' records are not part of the kept keyspace.
			b.Cleanup(func() { unlinkPrefix(c, prefix+spaces[i].prefix) })
		}
	}
	for range rounds {
		for _, t := range spaces {
			b.Run(fmt.Sprintf("records=%d", t.n), func(b *testing.B) {
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
					b.ReportMetric(t.perRecord, "server-bytes/record")
				})
				b.Run("DuplicateOfARandomRecord", func(b *testing.B) {
					b.SetParallelism(8)
					b.RunParallel(func(pb *testing.PB) {
						rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
						for pb.Next() {
							c, err := t.g.Claim(b.Context(), growthKey(rng.IntN(t.n)), growthFingerprint)
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

// growthSizes is 10,000 and then IC_GROWTH_RECORDS's sizes (default
// 200,000).
func growthSizes(b *testing.B) []int {
	sizes := []int{10_000}
	v := os.Getenv("IC_GROWTH_RECORDS")
	if v == "" {
		v = "200000"
	}
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

func growthKey(i int) string { return fmt.Sprintf("CHG-%010d", i) }

// growthFingerprint is the prefilled records' fingerprint (one for all:
// the duplicate check reads it, its value does not matter).
var growthFingerprint = fmt.Sprintf("%064x", 42)

// prefillRedis writes n DONE records under prefix (pipelines of 1,000,
// four at a time) unless the last one is there already.
func prefillRedis(b *testing.B, c *redis.Client, prefix string, n int) {
	b.Helper()
	ctx := b.Context()
	if c.Exists(ctx, prefix+growthKey(n-1)).Val() == 1 && c.Exists(ctx, prefix+growthKey(0)).Val() == 1 {
		return
	}
	start := time.Now()
	now := time.Now().UnixMilli()
	retention := 14 * 24 * time.Hour
	expires := strconv.FormatInt(now+retention.Milliseconds(), 10)
	nowS := strconv.FormatInt(now, 10)
	const batch = 1000
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	slots := make(chan struct{}, 4)
	for from := 0; from < n && failed.Load() == nil; from += batch {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			p := c.Pipeline()
			for i := from; i < min(from+batch, n); i++ {
				k := prefix + growthKey(i)
				p.HSet(ctx, k, "state", "DONE", "token", fmt.Sprintf("%032x", i), "fingerprint", growthFingerprint, "attempt", "1",
					"lease_until", nowS, "created_at", nowS, "updated_at", nowS, "expires_at", expires,
					"status", "DEBITED", "detail", fmt.Sprintf("CBS%010d", i), "generation", "1", "history", "")
				p.PExpire(ctx, k, retention)
			}
			if _, err := p.Exec(ctx); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.Logf("built %d records under %s in %s", n, prefix, time.Since(start).Round(time.Second))
}

// unlinkPrefix removes every key under prefix (SCAN, UNLINK 1,000 at a
// time).
func unlinkPrefix(c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	keys := make([]string, 0, 1000)
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == cap(keys) {
			c.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		c.Unlink(ctx, keys...)
	}
}
