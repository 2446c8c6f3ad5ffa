package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver, for goqite
	"maragu.dev/goqite"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// BenchmarkDrainVersusGoqite is how the queue was chosen: the same 5,000
// messages drained by 8 concurrent receivers (receive, then delete) through
// this package's queue (batches of 10, FOR UPDATE SKIP LOCKED) and through
// goqite's PostgreSQL flavour (one message per receive, in a serializable
// transaction that the caller retries on a serialization failure), on the
// same server in the same run. It reports messages/s, how many deliveries
// were duplicates within the visibility timeout (there should be none),
// and goqite's retries.
func BenchmarkDrainVersusGoqite(b *testing.B) {
	const n, workers = 5000, 8
	body := []byte(`{"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`)
	b.Run("ours", func(b *testing.B) {
		db := pgtest.Open(b)
		for range b.N {
			q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("q"), VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			msgs := make([]queue.Outgoing, n)
			for i := range msgs {
				msgs[i] = queue.Outgoing{Body: body}
			}
			if _, err := q.SendBatch(b.Context(), msgs); err != nil {
				b.Fatal(err)
			}
			drain(b, n, workers, func(ctx context.Context) (int, []string, error) {
				got, err := q.Receive(ctx, 10)
				if err != nil || len(got) == 0 {
					return 0, nil, err
				}
				ids := make([]string, len(got))
				for i, m := range got {
					ids[i] = m.ID
				}
				return len(got), ids, q.Ack(ctx, got)
			})
		}
	})
	b.Run("goqite", func(b *testing.B) {
		schema := dbtest.Schema(b)
		sqldb, err := sql.Open("pgx", dbtest.PostgresURL())
		if err != nil {
			b.Fatal(err)
		}
		defer sqldb.Close()
		sqldb.SetMaxOpenConns(16)
		schemaSQL, err := os.ReadFile(goqiteSchemaPath(b))
		if err != nil {
			b.Fatal(err)
		}
		ctx := b.Context()
		ddl := strings.ReplaceAll(string(schemaSQL), "create extension if not exists pgcrypto;", "")
		if _, err := sqldb.ExecContext(ctx, "create extension if not exists pgcrypto"); err != nil {
			b.Skip("goqite's PostgreSQL schema needs pgcrypto: ", err)
		}
		if _, err := sqldb.ExecContext(ctx, "create schema "+schema+"; set search_path = "+schema+", public; "+ddl); err != nil {
			b.Fatal(err)
		}
		sqldb.Close()
		sqldb, err = sql.Open("pgx", dbtest.PostgresURL()+"&search_path="+schema+",public")
		if err != nil {
			b.Fatal(err)
		}
		sqldb.SetMaxOpenConns(16)
		for range b.N {
			q := goqite.New(goqite.NewOpts{DB: sqldb, Name: dbtest.Name("q"), SQLFlavor: goqite.SQLFlavorPostgreSQL, Timeout: time.Minute})
			for range n {
				if err := q.Send(ctx, goqite.Message{Body: body}); err != nil {
					b.Fatal(err)
				}
			}
			var conflicts atomic.Int64
			drain(b, n, workers, func(ctx context.Context) (int, []string, error) {
				m, err := q.Receive(ctx)
				if err != nil && strings.Contains(err.Error(), "40001") {
					conflicts.Add(1) // goqite receives in a serializable transaction: a retry is the caller's
					return 0, nil, nil
				}
				if err != nil || m == nil {
					return 0, nil, err
				}
				for {
					err := q.Delete(ctx, m.ID)
					if err == nil || !strings.Contains(err.Error(), "40001") {
						return 1, []string{string(m.ID)}, err
					}
					conflicts.Add(1)
				}
			})
			b.ReportMetric(float64(conflicts.Load()), "serialization_retries")
		}
	})
}

// drain runs workers calling take until n deliveries were seen, and
// reports the rate and the duplicate deliveries.
func drain(b *testing.B, n, workers int, take func(context.Context) (int, []string, error)) {
	var got, dups atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	start := time.Now()
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for got.Load() < int64(n) && ctx.Err() == nil {
				k, ids, err := take(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if k == 0 {
					if got.Load() >= int64(n) {
						return
					}
					continue
				}
				mu.Lock()
				for _, id := range ids {
					if seen[id] {
						dups.Add(1)
					} else {
						seen[id] = true
						got.Add(1)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(dups.Load()), "duplicate_deliveries")
	if got.Load() < int64(n) {
		b.Fatalf("drained %d of %d", got.Load(), n)
	}
}

func goqiteSchemaPath(b *testing.B) string {
	b.Helper()
	dir, err := goModDir("maragu.dev/goqite")
	if err != nil {
		b.Skip(err)
	}
	return dir + "/schema_postgres.sql"
}

func goModDir(mod string) (string, error) {
	out, err := exec("go", "list", "-m", "-f", "{{.Dir}}", mod)
	if err != nil {
		return "", fmt.Errorf("locate %s: %v", mod, err)
	}
	return strings.TrimSpace(out), nil
}

func exec(name string, args ...string) (string, error) {
	out, err := osexec.Command(name, args...).Output()
	return string(out), err
}
