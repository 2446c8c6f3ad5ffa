package sqlite

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// countingPolicy claims a message under its body as the key, counting the
// reads, each with a token of its own; what it read is the key.
func countingPolicy(reads *atomic.Int64) queue.ClaimPolicy {
	return queue.ClaimPolicy{Read: func(m queue.Message) (driver.ClaimRequest, any, bool) {
		n := reads.Add(1)
		now := time.Now().UTC()
		key := string(m.Body)
		return driver.ClaimRequest{Key: key, Token: fmt.Sprintf("t%d", n), Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}, key, true
	}}
}

// A claiming receive takes the claims prepared outside the writer, each
// once, made from the very body it received: a claim prepared too long
// ago, or from a body that has changed since, is made again in the write.
func TestAReceiveTakesTheClaimsPreparedOutsideTheWriter(t *testing.T) {
	for _, tc := range []struct {
		name string
		// meddle runs between the prepare and the receive.
		meddle func(t *testing.T, q *Queue)
		// again is how many claims the receive makes again (in its own
		// prepare for a stale one, in the write for a changed body).
		again int
		keys  []string
	}{
		{"as prepared", func(*testing.T, *Queue) {}, 0, []string{"k0", "k1", "k2"}},
		{"prepared too long ago", func(_ *testing.T, q *Queue) {
			q.prepared.mu.Lock()
			defer q.prepared.mu.Unlock()
			for id, e := range q.prepared.m {
				e.at = e.at.Add(-maxPreparedAge)
				q.prepared.m[id] = e
			}
		}, 3, []string{"k0", "k1", "k2"}},
		{"a body changed since", func(t *testing.T, q *Queue) {
			if _, err := q.db.sql.ExecContext(t.Context(), `update goqite set body = cast('k9' as blob) where body = cast('k1' as blob)`); err != nil {
				t.Fatal(err)
			}
		}, 1, []string{"k0", "k9", "k2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(t.Context(), filepath.Join(t.TempDir(), "q.db"), OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			q, err := NewQueue(db, QueueOptions{WaitTime: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := q.Send(t.Context(), fmt.Appendf(nil, "k%d", i), nil); err != nil {
					t.Fatal(err)
				}
			}
			var reads atomic.Int64
			p := countingPolicy(&reads)
			q.prepare(t.Context(), p, 10)
			if got := reads.Load(); got != 3 {
				t.Fatalf("prepare read %d messages, want 3", got)
			}
			tc.meddle(t, q)
			// The receive prepares nothing more: the three are prepared
			// (or being judged stale), and no other message waits.
			msgs, err := q.ReceiveClaiming(t.Context(), 10, p)
			if err != nil {
				t.Fatal(err)
			}
			if got := reads.Load() - 3; got != int64(tc.again) {
				t.Errorf("the receive read %d messages itself, want %d", got, tc.again)
			}
			store := NewStore(db)
			var keys []string
			for _, m := range msgs {
				if m.Bound == nil {
					t.Fatalf("message %s received without its claim", m.Body)
				}
				if m.Parsed() != string(m.Body) {
					t.Errorf("message %s carries %v as read, want its key", m.Body, m.Parsed())
				}
				rec, err := store.Get(t.Context(), string(m.Body), time.Now())
				if err != nil || rec.State != driver.StateInProgress {
					t.Fatalf("record %s: %+v, %v; want IN_PROGRESS", m.Body, rec, err)
				}
				keys = append(keys, string(m.Body))
			}
			if fmt.Sprint(keys) != fmt.Sprint(tc.keys) {
				t.Errorf("received %v, want %v", keys, tc.keys)
			}
			// Each prepared claim is handed out once.
			q.prepared.mu.Lock()
			left := len(q.prepared.m)
			q.prepared.mu.Unlock()
			if tc.again == 0 && left != 0 {
				t.Errorf("%d prepared claims left after the receive took them", left)
			}
		})
	}
}

// Two claiming receives never bind two deliveries to one prepared claim's
// token: a claim is taken once, and only while fresh.
func TestAPreparedClaimIsTakenOnce(t *testing.T) {
	var c preparedClaims
	m := queue.Message{ID: "1", Body: []byte("k")}
	var reads atomic.Int64
	p := countingPolicy(&reads)
	if mine := c.reserve([]string{"1"}, time.Now()); !mine[0] {
		t.Fatal("a fresh id was not reserved")
	}
	if mine := c.reserve([]string{"1"}, time.Now()); mine[0] {
		t.Fatal("an id being prepared was reserved twice")
	}
	c.put([]queue.Message{m}, []queue.Prepared{p.Prepare(m)}, time.Now())
	if _, ok := c.take(m); !ok {
		t.Fatal("the prepared claim was not handed out")
	}
	if _, ok := c.take(m); ok {
		t.Fatal("a prepared claim was handed out twice")
	}
	// One prepared too long ago is not handed out (and is gone).
	c.reserve([]string{"1"}, time.Now())
	c.put([]queue.Message{m}, []queue.Prepared{p.Prepare(m)}, time.Now().Add(-maxPreparedAge))
	if _, ok := c.take(m); ok {
		t.Fatal("a claim prepared too long ago was handed out")
	}
	if _, ok := c.take(m); ok {
		t.Fatal("a stale prepared claim stayed")
	}
}
