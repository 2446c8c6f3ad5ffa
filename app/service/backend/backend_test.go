package backend

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

func TestRedisWithoutTLSToAnotherHostWarns(t *testing.T) {
	for raw, warns := range map[string]bool{
		"redis://127.0.0.1:6379/0":       false,
		"redis://localhost:6379/0":       false,
		"redis://[::1]:6379/0":           false,
		"redis://cache.internal:6379/0":  true,
		"redis://10.0.0.7:6379/0":        true,
		"rediss://cache.internal:6380/0": false,
	} {
		opts, err := redis.ParseURL(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(redisWarnings(opts)) > 0; got != warns {
			t.Errorf("%s: warning %v, want %v", raw, got, warns)
		}
	}
}

func TestPostgreSQLWithoutVerifiedTLSWarns(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	var c Config
	c.FreshDefaults()
	c.Kind, c.PostgresURL, c.PostgresSchema = Postgres, dbtest.PostgresURL(), dbtest.Schema(t)
	b, err := Open(t.Context(), c, 30*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], "sslmode=disable") {
		t.Errorf("warnings %q, want one about sslmode=disable", b.Warnings)
	}
}
