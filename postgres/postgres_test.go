package postgres_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
)

func TestStoreConformance(t *testing.T) {
	s := postgres.NewStore(pgtest.Open(t))
	storetest.Conformance(t, s)
}

// The same suite and histories with every claim written in a queue
// receive's transaction and every finish in the transaction that deletes
// its message (the co-located path): the same state machine, row by row.
func TestStoreConformanceThroughTheQueue(t *testing.T) {
	db := pgtest.Open(t)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("claims"), VisibilityTimeout: 12 * time.Hour,
		WaitTime: 5 * time.Millisecond, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.ConformanceThroughQueue(t, q, postgres.NewStore(db))
}

// Claims ride in the PostgreSQL queue's transactions (queue.ClaimingReceiver).
func TestQueueClaiming(t *testing.T) {
	db := pgtest.Open(t)
	queuetest.Claiming(t, queuetest.ClaimingHarness{Open: func(t *testing.T, visibility time.Duration) (queuetest.ClaimingQueue, driver.Store) {
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("claiming"), VisibilityTimeout: visibility,
			WaitTime: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q, postgres.NewStore(db)
	}})
}

func TestQueueConformance(t *testing.T) {
	db := pgtest.Open(t)
	queuetest.Run(t, queuetest.Harness{Open: func(t *testing.T, o queuetest.Options) queue.Queue {
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("q"), VisibilityTimeout: o.Visibility,
			MaxReceiveCount: o.MaxReceiveCount, WaitTime: 100 * time.Millisecond, SweepInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}})
}

// Processes starting together on a new schema migrate it once: the schema
// and the version table are created under the migration lock, so no opener
// fails with a duplicate-key error from a concurrent CREATE … IF NOT EXISTS.
func TestConcurrentOpensOfANewSchemaAllSucceed(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	const n = 12
	for round := range 3 {
		schema := dbtest.Schema(t)
		errs := make(chan error, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				db, err := postgres.Open(t.Context(), dbtest.PostgresURL(), postgres.Options{Schema: schema, MaxConns: 2})
				if err == nil {
					db.Close()
				}
				errs <- err
			}()
		}
		close(start)
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("round %d: open of a new schema by one of %d processes at once: %v", round, n, err)
			}
		}
	}
}
