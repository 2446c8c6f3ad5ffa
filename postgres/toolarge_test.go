package postgres_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/queue"
)

// A message over the size limit written around Send is never read into
// memory: a receive moves it to the DLQ unread (one statement, body and
// all) with its reason, and hands out the others.
func TestAMessageOverTheLimitIsDeadLetteredUnread(t *testing.T) {
	db := dbtest.Postgres(t)
	name := dbtest.Name("big")
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: 30 * time.Second, WaitTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const huge = 64 << 20
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes) values ($1, convert_to(repeat('x', $2), 'UTF8'), '{"origin":"batch-7"}')`, name, huge); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), []byte(`{"small":true}`), nil); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	msgs, err := q.Receive(t.Context(), 10)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || string(msgs[0].Body) != `{"small":true}` {
		t.Fatalf("received %d messages, want only the small one", len(msgs))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > huge/4 {
		t.Errorf("receiving allocated %d MiB: the %d MiB body was read", got>>20, huge>>20)
	}
	var code string
	var size int
	if err := db.Pool().QueryRow(t.Context(), `select attributes->>$2, octet_length(body) from queue_messages where queue <> $1 and attributes->>'origin' = 'batch-7' and queue like $1 || '%'`,
		name, queue.CodeAttribute).Scan(&code, &size); err != nil {
		t.Fatalf("no DLQ copy: %v", err)
	}
	if code != string(queue.CodeTooLarge) || size != huge {
		t.Errorf("DLQ copy with code %q and %d bytes, want %s and %d", code, size, queue.CodeTooLarge, huge)
	}
}

// A DLQ entry over the size limit can only be purged: a redrive, even
// forced, refuses to move it back, and it stays on the DLQ (as on SQLite).
func TestARedriveRefusesAMessageOverTheLimit(t *testing.T) {
	db := dbtest.Postgres(t)
	name := dbtest.Name("bigdlq")
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, WaitTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const huge = queue.MaxMessageBytes + 1
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes) values ($1, convert_to(repeat('x', $2), 'UTF8'), $3)`,
		name+"-dlq", huge, `{"`+queue.CodeAttribute+`":"too_large"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Redrive(t.Context(), queue.RedriveOptions{Force: true}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("forced redrive of an entry over the limit: err = %v, want ErrTooLarge", err)
	}
	d, err := q.Depth(t.Context())
	if err != nil || d.DLQ != 1 || d.Waiting != 0 {
		t.Fatalf("after the refused redrive: %+v (%v), want it still on the DLQ and nothing on the queue", d, err)
	}
}
