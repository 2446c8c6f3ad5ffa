package postgres_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// Close ends a VACUUM of the queue table under way instead of waiting it
// out (up to its 5-minute bound): a process shutting down while its
// background VACUUM runs is not held up by it, and leaves none running.
// The VACUUM is made slow with the session's cost-based delay (a sleep
// after every page), so that it is surely under way when Close is called.
func TestCloseEndsAQueueVacuumUnderWay(t *testing.T) {
	owner := pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	var schema string
	if err := owner.Pool().QueryRow(t.Context(), `select current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	slow := dbtest.PostgresURL()
	if strings.Contains(slow, "?") {
		slow += "&"
	} else {
		slow += "?"
	}
	slow += "vacuum_cost_delay=100&vacuum_cost_limit=1"
	db, err := postgres.Open(t.Context(), slow, postgres.Options{Schema: schema, QueueVacuumThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			db.Close()
		}
	})
	postgres.QueueVacuums(db, 10*time.Millisecond)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("vac"), VisibilityTimeout: time.Minute,
		WaitTime: 10 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 1000) // ~7 rows a page: hundreds of pages, each followed by a 100 ms sleep
	for i := 0; i < 1000; i += 100 {
		batch := make([]queue.Outgoing, 0, 100)
		for j := i; j < i+100; j++ {
			batch = append(batch, queue.Outgoing{Body: append([]byte(strconv.Itoa(j)), body...)})
		}
		if _, err := q.SendBatch(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := owner.Pool().Exec(t.Context(), `delete from queue_messages`); err != nil {
		t.Fatal(err)
	}
	vacuums := func() (n int64) {
		if err := owner.Pool().QueryRow(t.Context(), `select vacuum_count from pg_stat_user_tables where relid = 'queue_messages'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	running := func() (n int) {
		if err := owner.Pool().QueryRow(t.Context(), `select count(*) from pg_stat_progress_vacuum where relid = 'queue_messages'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := vacuums()
	deadline := time.Now().Add(30 * time.Second)
	for running() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no VACUUM of the queue table started (1,000 dead rows, threshold 1)")
		}
		if _, err := q.Receive(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	closed = true
	if n := running(); n != 0 {
		t.Errorf("after Close, %d VACUUMs of the process still run", n)
	}
	if after := vacuums(); after != before {
		t.Errorf("Close waited for the VACUUM under way to finish (vacuum_count %d -> %d); want it ended", before, after)
	}
}
