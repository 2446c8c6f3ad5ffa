package postgres_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// A VACUUM of the queue table that fails (here the role's
// statement_timeout ends it; a site's timeout shorter than the VACUUM
// does so every time) is not started again at the next check interval:
// the process waits longer, as after a VACUUM that removed nothing,
// instead of rescanning the table every second to no end.
func TestAFailedQueueVacuumBacksOff(t *testing.T) {
	owner := pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	var schema string
	if err := owner.Pool().QueryRow(t.Context(), `select current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	short := dbtest.PostgresURL()
	if strings.Contains(short, "?") {
		short += "&"
	} else {
		short += "?"
	}
	short += "statement_timeout=300&vacuum_cost_delay=100&vacuum_cost_limit=1"
	var logged bytes.Buffer
	var logMu sync.Mutex
	db, err := postgres.Open(t.Context(), short, postgres.Options{Schema: schema, QueueVacuumThreshold: 1,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	postgres.QueueVacuums(db, 10*time.Millisecond)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("vac"), VisibilityTimeout: time.Minute,
		WaitTime: 10 * time.Millisecond, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 1000)
	for i := 0; i < 500; i += 100 {
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
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for last == nil {
		if time.Now().After(deadline) {
			t.Fatal("no VACUUM of the queue table failed: the test does not make one fail")
		}
		if _, err := q.Receive(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		_, _, last = postgres.QueueVacuums(db, 0)
	}
	logMu.Lock()
	line := logged.String()
	logMu.Unlock()
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "vacuuming the queue table failed") || !strings.Contains(line, "statement timeout") {
		t.Errorf("the failed VACUUM (%v) was not logged as a warning with its cause; logged %q", last, line)
	}
	if b := postgres.QueueVacuumBackoff(db); b <= 10*time.Millisecond {
		t.Errorf("after a VACUUM that failed (%v), the next check in %v; want longer than the 10ms interval", last, b)
	}
}

// lockedWriter serialises a logger's writes with the test's reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
