package backend

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/redis/go-redis/v9"
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

func TestPurgeSaysWhatItDeletedOrWould(t *testing.T) {
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "purge", "purge [flags]")
	var o SetupOptions
	var sc SweepConfig
	o.Bind(f)
	sc.Bind(f)
	if err := f.Parse([]string{"--backend", "embedded", "--db", filepath.Join(t.TempDir(), "p.db")}, false); err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), o.Backend, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		name string
		r    PurgeRun
		want string
	}{
		{"dry run", PurgeRun{Sweep: sc, DryRun: true}, "past retention: would delete 0 idempotency record(s), 0 queue message(s), 0 DLQ message(s)\n"},
		{"deleted", PurgeRun{Sweep: sc, Now: time.Now()}, "past retention: deleted 0 idempotency record(s), 0 queue message(s), 0 DLQ message(s)\n"},
		{"json", PurgeRun{Sweep: sc, DryRun: true, JSON: true}, `{"records":0,"messages":0,"dlq_messages":0,"dry_run":true}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Purge(t.Context(), b, tc.r, &out); err != nil || out.String() != tc.want {
				t.Fatalf("Purge: %v\n got %q\nwant %q", err, out.String(), tc.want)
			}
		})
	}
	var out bytes.Buffer
	if err := Purge(t.Context(), &Backend{Store: nil, Expirer: nil}, PurgeRun{Sweep: sc}, &out); err != nil || !strings.HasPrefix(out.String(), "nothing to do") {
		t.Fatalf("Purge of a backend that expires by itself: %v, %q", err, out.String())
	}
}

func TestSetupChecksThenCreatesTheEmbeddedBackend(t *testing.T) {
	dir := t.TempDir()
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	parse := func(args ...string) SetupOptions {
		f := cli.NewFlagSet(env, "setup", "setup [flags]")
		var o SetupOptions
		o.Bind(f)
		if err := f.Parse(append([]string{"--backend", "embedded", "--db", filepath.Join(dir, "s.db")}, args...), false); err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name  string
		args  []string
		usage string // "": it sets up
	}{
		{"visibility under 1s", []string{"--visibility", "500ms"}, "--visibility 500ms is outside 1s-12h"},
		{"visibility over 12h", []string{"--visibility", "13h"}, "is outside 1s-12h"},
		{"a topic SNS refuses", []string{"--notify", "sns", "--notify-sns-topic", "no spaces"}, `--notify-sns-topic "no spaces": a topic name`},
		{"a FIFO topic with nothing before .fifo", []string{"--notify", " sns ", "--notify-sns-topic", ".fifo"}, "a topic name"},
		{"a bad name, no topic asked for", []string{"--notify", "log", "--notify-sns-topic", "no spaces"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Setup(t.Context(), parse(tc.args...), &out)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("Setup: %v; want a usage error naming %q", err, tc.usage)
				}
				if _, err := os.Stat(filepath.Join(dir, "s.db")); err == nil {
					t.Fatal("a refused setup created the database")
				}
				return
			}
			if err != nil || !strings.HasPrefix(out.String(), "ready: ") || strings.Contains(out.String(), "sns topic") {
				t.Fatalf("Setup: %v\n%s", err, out.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "s.db")); err != nil {
				t.Fatalf("no database after setup: %v", err)
			}
		})
	}
}
