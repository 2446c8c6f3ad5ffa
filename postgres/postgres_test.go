package postgres_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
)

func TestStoreConformance(t *testing.T) {
	s := postgres.NewStore(dbtest.Postgres(t))
	storetest.Run(t, func(*testing.T) idempotency.Store { return s })
}

func TestQueueConformance(t *testing.T) {
	db := dbtest.Postgres(t)
	queuetest.Run(t, queuetest.Harness{Open: func(t *testing.T, o queuetest.Options) queue.Queue {
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("q"), VisibilityTimeout: o.Visibility,
			MaxReceiveCount: o.MaxReceiveCount, WaitTime: 100 * time.Millisecond, SweepInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}})
}
