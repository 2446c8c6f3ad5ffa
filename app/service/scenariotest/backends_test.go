package scenariotest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/app/service/scenariotest"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/redisstore"
	"github.com/finedge/idempotent-consumer/sqlite"
)

func TestMemory(t *testing.T) {
	scenariotest.Run(t, scenariotest.Harness{Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
		return scenariotest.Backend{
			Queue: memqueue.New(memqueue.Options{VisibilityTimeout: visibility, WaitTime: 20 * time.Millisecond, MaxReceiveCount: 50}),
			Store: memstore.New(),
		}
	}})
}

// The Redis store (--store redis) under a queue of its own: the scenarios
// against the store's scripts.
func TestRedisStore(t *testing.T) {
	scenariotest.Run(t, scenariotest.Harness{Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
		c, prefix := dbtest.Redis(t)
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return scenariotest.Backend{
			Queue: memqueue.New(memqueue.Options{VisibilityTimeout: visibility, WaitTime: 20 * time.Millisecond, MaxReceiveCount: 50}),
			Store: s,
		}
	}})
}

// The claims ride in the queue's transactions (as serve runs it); with
// Separate, they are store calls of their own (--colocate off).
func TestEmbeddedSQLite(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(map[bool]string{false: "ClaimsInTheQueuesTransactions", true: "SeparateStoreCalls"}[separate], func(t *testing.T) {
			scenariotest.Run(t, scenariotest.Harness{Separate: separate, Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
				path := filepath.Join(t.TempDir(), "scenario.db")
				db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				q, err := sqlite.NewQueue(db, sqlite.QueueOptions{VisibilityTimeout: visibility, WaitTime: 100 * time.Millisecond, MaxReceiveCount: 50})
				if err != nil {
					t.Fatal(err)
				}
				return scenariotest.Backend{Queue: q, Store: sqlite.NewStore(db), WriteTooLarge: func(t *testing.T, n int) {
					raw, err := sql.Open("sqlite", path) // beside the queue, as another writer would
					if err != nil {
						t.Fatal(err)
					}
					defer raw.Close()
					for range n {
						if _, err := raw.ExecContext(t.Context(), `insert into goqite (id, queue, body) values (?, 'charges', zeroblob(?))`,
							dbtest.Name("m_big"), queue.MaxMessageBytes+1); err != nil {
							t.Fatal(err)
						}
					}
				}}
			}})
		})
	}
}

func TestPostgreSQL(t *testing.T) {
	scenariotest.Run(t, scenariotest.Harness{Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
		// A schema of the scenario's own, on a pool of four connections
		// (pgx's default on up to four CPUs) under four receives.
		db := pgtest.With(t, postgres.Options{MaxConns: 4})
		name := dbtest.Name("q")
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: visibility,
			WaitTime: 100 * time.Millisecond, MaxReceiveCount: 50})
		if err != nil {
			t.Fatal(err)
		}
		return scenariotest.Backend{Queue: q, Store: postgres.NewStore(db), WriteTooLarge: func(t *testing.T, n int) {
			if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body) select $1, convert_to(repeat('x', $2), 'UTF8') from generate_series(1, $3)`,
				name, queue.MaxMessageBytes+1, n); err != nil {
				t.Fatal(err)
			}
		}}
	}})
}

func TestAWSOnTheEmulator(t *testing.T) {
	scenariotest.Run(t, scenariotest.Harness{Emulated: true, Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
		cfg := awstest.Config(t)
		ddb, sqsc := dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
		table := awstest.Name("idem")
		if err := awsdynamodb.CreateTable(t.Context(), ddb, table); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), ddb, table) })
		name := awstest.Name("charges")
		qs, err := awssqs.CreateQueues(t.Context(), sqsc, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq", VisibilityTimeout: visibility, MaxReceiveCount: 50})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = awssqs.DeleteQueue(context.Background(), sqsc, qs.URL)
			_ = awssqs.DeleteQueue(context.Background(), sqsc, qs.DLQURL)
		})
		q, err := awssqs.New(sqsc, awssqs.Options{QueueURL: qs.URL, DLQURL: qs.DLQURL, WaitTime: time.Second, VisibilityTimeout: visibility})
		if err != nil {
			t.Fatal(err)
		}
		store, err := awsdynamodb.New(ddb, table)
		if err != nil {
			t.Fatal(err)
		}
		return scenariotest.Backend{Queue: q, Store: store}
	}})
}
