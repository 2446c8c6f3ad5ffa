package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/idempotency/storetest"
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
	var tables []storetest.GrowthTable
	for _, n := range storetest.GrowthSizes(b, "200000") {
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
		var bytes int64
		for range 200 {
			m, err := c.MemoryUsage(b.Context(), prefix+storetest.GrowthKey(rand.IntN(n))).Result()
			if err != nil {
				b.Fatal(err)
			}
			bytes += m
		}
		fresh := storetest.GrowthFreshPrefix()
		if keep != "" {
			// The fresh claims' records are not part of the kept keyspace.
			b.Cleanup(func() { unlinkPrefix(c, prefix+fresh) })
		}
		tables = append(tables, storetest.GrowthTable{N: n, Store: s, FreshPrefix: fresh,
			Metrics: map[string]float64{"server-bytes/record": float64(bytes) / 200}})
	}
	storetest.Growth(b, tables)
}

// prefillRedis writes n DONE records under prefix (pipelines of 1,000,
// four at a time) unless the last one is there already.
func prefillRedis(b *testing.B, c *redis.Client, prefix string, n int) {
	b.Helper()
	ctx := b.Context()
	if c.Exists(ctx, prefix+storetest.GrowthKey(n-1)).Val() == 1 && c.Exists(ctx, prefix+storetest.GrowthKey(0)).Val() == 1 {
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
				k := prefix + storetest.GrowthKey(i)
				p.HSet(ctx, k, "state", "DONE", "token", fmt.Sprintf("%032x", i), "fingerprint", storetest.GrowthFingerprint, "attempt", "1",
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
