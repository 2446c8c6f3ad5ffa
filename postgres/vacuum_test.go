package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// drainAll receives from qs (two receivers on each) and acks until want
// messages have come, and returns how many times each body came.
func drainAll(t *testing.T, qs []*postgres.Queue, want int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	for _, q := range qs {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					msgs, err := q.Receive(ctx, 10)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("receive: %v", err)
						}
						return
					}
					if len(msgs) == 0 {
						continue
					}
					mu.Lock()
					for _, m := range msgs {
						seen[string(m.Body)]++
						total++
					}
					done := total >= want
					mu.Unlock()
					if err := q.Ack(context.WithoutCancel(ctx), msgs); err != nil {
						t.Errorf("ack: %v", err)
					}
					if done {
						cancel()
					}
				}
			}()
		}
	}
	wg.Wait()
	return seen
}

func sendN(t *testing.T, q *postgres.Queue, n int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		batch := make([]queue.Outgoing, 0, 100)
		for j := i; j < min(i+100, n); j++ {
			batch = append(batch, queue.Outgoing{Body: []byte("m-" + strconv.Itoa(j))})
		}
		if _, err := q.SendBatch(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
	}
}

func checkOnce(t *testing.T, seen map[string]int, n int) {
	t.Helper()
	for i := range n {
		if c := seen["m-"+strconv.Itoa(i)]; c != 1 {
			t.Errorf("message m-%d delivered %d times, want 1", i, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct messages delivered, want %d", len(seen), n)
	}
}

// ownSchema opens the test database in a schema of the test's own as its
// owner (pgtest.Open), and returns it with the schema's name.
func ownSchema(t *testing.T) (*postgres.DB, string) {
	t.Helper()
	owner := pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	var schema string
	if err := owner.Pool().QueryRow(t.Context(), `select current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	return owner, schema
}

// withParams is the test database's URL with params added to its query.
func withParams(params string) string {
	u := dbtest.PostgresURL()
	if strings.Contains(u, "?") {
		return u + "&" + params
	}
	return u + "?" + params
}

// vacQueue is a queue of db that receives with wait.
func vacQueue(t *testing.T, db *postgres.DB, wait time.Duration) *postgres.Queue {
	t.Helper()
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("vac"), VisibilityTimeout: time.Minute,
		WaitTime: wait, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// deadRows sends n messages of 1,000 bytes to q (~7 rows a page) and
// deletes every message of the schema as owner: n dead rows to vacuum.
func deadRows(t *testing.T, owner *postgres.DB, q *postgres.Queue, n int) {
	t.Helper()
	body := bytes.Repeat([]byte("x"), 1000)
	for i := 0; i < n; i += 100 {
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
}

// Two processes on one schema, each vacuuming the queue table as soon as it
// holds 50 dead rows (checked every 20 ms), while their four receivers take
// and ack 3,000 messages sent meanwhile: every message is delivered
// exactly once, the VACUUMs ran (one process's SKIP_LOCKED leaves the
// table to the other's rather than wait) and none failed, and the queue is
// empty afterwards.
func TestQueueVacuumWhileTwoProcessesReceive(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	schema := dbtest.Schema(t)
	var dbs []*postgres.DB
	var qs []*postgres.Queue
	name := dbtest.Name("vac")
	for range 2 {
		db, err := postgres.Open(t.Context(), dbtest.PostgresURL(), postgres.Options{Schema: schema, QueueVacuumThreshold: 50})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		postgres.QueueVacuums(db, 20*time.Millisecond)
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: time.Minute,
			WaitTime: 20 * time.Millisecond, PollInterval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		dbs, qs = append(dbs, db), append(qs, q)
	}
	const n = 3000
	sent := make(chan struct{})
	go func() { defer close(sent); sendN(t, qs[0], n) }()
	seen := drainAll(t, qs, n)
	<-sent
	checkOnce(t, seen, n)
	// The deletes reach the statistics within PostgreSQL's flush interval,
	// which a fast drain can end before; each receive lets a process check.
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		r0, _, _ := postgres.QueueVacuums(dbs[0], 0)
		r1, _, _ := postgres.QueueVacuums(dbs[1], 0)
		if r0+r1 > 0 {
			break
		}
		for _, q := range qs {
			if _, err := q.Receive(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	var runs int64
	for i, db := range dbs {
		r, notOwner, err := postgres.QueueVacuums(db, 0)
		if err != nil || notOwner {
			t.Errorf("process %d: the last vacuum of the queue table: %v (not owner: %v)", i, err, notOwner)
		}
		runs += r
	}
	var count int64
	if err := dbs[0].Pool().QueryRow(t.Context(), `select vacuum_count from pg_stat_user_tables where relid = 'queue_messages'::regclass`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if runs == 0 || count == 0 {
		t.Errorf("the queue table was vacuumed %d times by the processes, %d by the server's count; want both > 0 (6,000 dead rows made, threshold 50)", runs, count)
	}
	if d, err := qs[0].Depth(t.Context()); err != nil || d.Waiting+d.InFlight != 0 {
		t.Errorf("after the run: %+v %v, want an empty queue", d, err)
	}
}

// A role that does not own the queue table (serve's least-privilege role)
// may not vacuum it: the process finds so once and never tries (a VACUUM
// would only warn), and receiving works as before.
func TestQueueVacuumSkippedByARoleThatDoesNotOwnTheTable(t *testing.T) {
	_, schema := ownSchema(t) // migrates the schema as the owner
	role := dbtest.Name("ic_vac_")
	conn, err := pgx.Connect(t.Context(), dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, stmt := range []string{"create role " + role + " login", "grant usage on schema " + schema + " to " + role,
		"grant select, insert, update, delete on all tables in schema " + schema + " to " + role} {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, dbtest.PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, "drop owned by "+role)
			_, _ = c.Exec(ctx, "drop role "+role)
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	db, err := postgres.Open(t.Context(), u.String(), postgres.Options{Schema: schema, Existing: true, QueueVacuumThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	postgres.QueueVacuums(db, 10*time.Millisecond)
	q := vacQueue(t, db, 20*time.Millisecond)
	const n = 300
	sendN(t, q, n)
	checkOnce(t, drainAll(t, []*postgres.Queue{q}, n), n)
	runs, notOwner, last := postgres.QueueVacuums(db, 0)
	if !notOwner || runs != 0 || last != nil {
		t.Errorf("as a role that does not own the table: %d vacuums, found not owner: %v, last error %v; want none tried, found, no error", runs, notOwner, last)
	}
}

// While a transaction older than the deletes runs in the same database, no
// VACUUM can remove the queue's dead rows: the process, finding them still
// over the threshold after its VACUUM, waits longer before the next check
// instead of scanning the table again and again.
func TestQueueVacuumBacksOffWhileAnOldTransactionHoldsTheDeadRows(t *testing.T) {
	db := pgtest.With(t, postgres.Options{QueueVacuumThreshold: 50})
	holder, err := pgx.Connect(t.Context(), dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var one int
	if err := tx.QueryRow(t.Context(), "select 1").Scan(&one); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	postgres.QueueVacuums(db, 10*time.Millisecond)
	q := vacQueue(t, db, 20*time.Millisecond)
	const n = 300
	sendN(t, q, n)
	checkOnce(t, drainAll(t, []*postgres.Queue{q}, n), n)
	// The deletes reach the statistics within PostgreSQL's flush interval;
	// each receive lets the process check.
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if runs, _, _ := postgres.QueueVacuums(db, 0); runs > 0 {
			break
		}
		if _, err := q.Receive(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
	runs, _, last := postgres.QueueVacuums(db, 0)
	if runs == 0 || last != nil {
		t.Fatalf("%d vacuums of the queue table holding %d dead rows (threshold 50), last error %v; want one, without error", runs, 2*n, last)
	}
	if b := postgres.QueueVacuumBackoff(db); b <= 10*time.Millisecond {
		t.Errorf("after a VACUUM that could remove nothing (an older snapshot is held), the next check in %v; want longer than the 10ms interval", b)
	}
}

// Close ends a VACUUM of the queue table under way instead of waiting it
// out (up to its 5-minute bound): a process shutting down while its
// background VACUUM runs is not held up by it, and leaves none running.
// The VACUUM is made slow with the session's cost-based delay (a sleep
// after every page), so that it is surely under way when Close is called.
func TestCloseEndsAQueueVacuumUnderWay(t *testing.T) {
	owner, schema := ownSchema(t)
	slow := withParams("vacuum_cost_delay=100&vacuum_cost_limit=1")
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
	q := vacQueue(t, db, 10*time.Millisecond)
	deadRows(t, owner, q, 1000) // hundreds of pages, each followed by a 100 ms sleep
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

// A VACUUM of the queue table that fails (here the role's
// statement_timeout ends it; a site's timeout shorter than the VACUUM
// does so every time) is not started again at the next check interval:
// the process waits longer, as after a VACUUM that removed nothing,
// instead of rescanning the table every second to no end.
func TestAFailedQueueVacuumBacksOff(t *testing.T) {
	owner, schema := ownSchema(t)
	short := withParams("statement_timeout=300&vacuum_cost_delay=100&vacuum_cost_limit=1")
	var logged bytes.Buffer
	var logMu sync.Mutex
	db, err := postgres.Open(t.Context(), short, postgres.Options{Schema: schema, QueueVacuumThreshold: 1,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	postgres.QueueVacuums(db, 10*time.Millisecond)
	q := vacQueue(t, db, 10*time.Millisecond)
	deadRows(t, owner, q, 500)
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
