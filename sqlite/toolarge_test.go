package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
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
	var entries map[string]DLQEntry
	var order []string
	queuetest.ReceiveBesideHuge(t, q, huge, func() { // the DLQ's listing too
		var err error
		if entries, order, err = q.DLQEntries(t.Context(), 10); err != nil {
			t.Fatal(err)
		}
	})
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
