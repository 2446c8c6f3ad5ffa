// Package dbtest gives tests their own PostgreSQL schema and Redis key
// prefix on the servers this project's machines run (127.0.0.1:5432,
// database test; 127.0.0.1:6379), and removes them when the test ends. A
// test that cannot reach a server fails in CI (CI=true) and skips
// elsewhere, saying how to start it.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/internal/testenv"
)

// The variables that point tests elsewhere.
const (
	PostgresEnv = "IC_POSTGRES_TEST_URL"
	RedisEnv    = "IC_REDIS_TEST_URL"
)

// PostgresURL is the test database's URL.
func PostgresURL() string {
	if u := os.Getenv(PostgresEnv); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisURL is the test Redis server's URL.
func RedisURL() string {
	if u := os.Getenv(RedisEnv); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func unreachable(t testing.TB, what, how string, err error) {
	t.Helper()
	testenv.Unreachable(t, what+" unreachable ("+err.Error()+"); start it with: "+how)
}

// Name is a unique lower-case identifier with prefix.
func Name(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Schema is a fresh schema name for a test, dropped when it ends.
func Schema(t testing.TB) string {
	t.Helper()
	s := Name("ic_test_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, PostgresURL())
		if err == nil {
			_, _ = conn.Exec(ctx, "drop schema if exists "+s+" cascade")
			_ = conn.Close(ctx)
		}
	})
	return s
}

// Redis returns a client and a key prefix of the test's own; the keys are
// deleted when the test ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("%s: %v", RedisEnv, err)
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		unreachable(t, "Redis at "+RedisURL(), `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no (or set `+RedisEnv+")", err)
	}
	prefix := Name("ic-test-") + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return c, prefix
}
