package sqlite

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// A message over the size limit written around Send (by hand, by an older
// version) is never read into memory: a receive moves it to the DLQ
// unread, with its reason, and hands out the others; the DLQ lists it
// without its body, and a redrive refuses to move it.
func TestAMessageOverTheLimitIsDeadLetteredUnread(t *testing.T) {
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := NewQueue(db, QueueOptions{Name: "charges", WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const huge = 64 << 20
	if _, err := db.sql.ExecContext(t.Context(), `insert into goqite (id, queue, body, attributes) values ('m_00big', 'charges', zeroblob(?), '{"origin":"batch-7"}')`, huge); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), []byte(`{"small":true}`), nil); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	msgs, err := q.Receive(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	entries, order, err := q.DLQEntries(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if len(msgs) != 1 || string(msgs[0].Body) != `{"small":true}` {
		t.Fatalf("received %d messages, want only the small one", len(msgs))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > huge/4 {
		t.Errorf("receiving and listing allocated %d MiB: the %d MiB body was read", got>>20, huge>>20)
	}
	if len(order) != 1 {
		t.Fatalf("the DLQ holds %d entries, want the large message", len(order))
	}
	e := entries[order[0]]
	if e.Reason().Code != queue.CodeTooLarge || !e.TooLarge || e.Body != nil || e.SourceID != "m_00big" || e.Attributes["origin"] != "batch-7" {
		t.Errorf("DLQ entry %+v, want too_large, unread, from m_00big with its attributes", e)
	}
	var size int
	if err := db.sql.QueryRowContext(t.Context(), `select length(body) from goqite where id = ?`, order[0]).Scan(&size); err != nil || size != huge {
		t.Errorf("the DLQ copy holds %d bytes (%v), want the whole %d", size, err, huge)
	}
	if _, err := q.Redrive(t.Context(), queue.RedriveOptions{Force: true}); err == nil {
		t.Error("a redrive moved a message over the limit back")
	}
}
