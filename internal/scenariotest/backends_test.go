package scenariotest_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/internal/scenariotest"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/postgres"
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

// The claims ride in the queue's transactions (as serve runs it); with
// Separate, they are store calls of their own (--colocate off).
func TestEmbeddedSQLite(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(map[bool]string{false: "ClaimsInTheQueuesTransactions", true: "SeparateStoreCalls"}[separate], func(t *testing.T) {
			scenariotest.Run(t, scenariotest.Harness{Separate: separate, Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
				db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "scenario.db"), sqlite.OpenOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				q, err := sqlite.NewQueue(db, sqlite.QueueOptions{VisibilityTimeout: visibility, WaitTime: 100 * time.Millisecond, MaxReceiveCount: 50})
				if err != nil {
					t.Fatal(err)
				}
				return scenariotest.Backend{Queue: q, Store: sqlite.NewStore(db)}
			}})
		})
	}
}

func TestPostgreSQL(t *testing.T) {
	scenariotest.Run(t, scenariotest.Harness{Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
		db := dbtest.Postgres(t) // a schema of the scenario's own
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("q"), VisibilityTimeout: visibility,
			WaitTime: 100 * time.Millisecond, MaxReceiveCount: 50})
		if err != nil {
			t.Fatal(err)
		}
		return scenariotest.Backend{Queue: q, Store: postgres.NewStore(db)}
	}})
}

func TestAWSOnTheEmulator(t *testing.T) {
	scenariotest.Run(t, scenariotest.Harness{Open: func(t *testing.T, visibility time.Duration) scenariotest.Backend {
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
