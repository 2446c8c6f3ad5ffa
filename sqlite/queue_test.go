package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

func openQueue(t *testing.T, path string, opts sqlite.QueueOptions) *sqlite.Queue {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "q.db")
	}
	db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if opts.WaitTime == 0 {
		opts.WaitTime = 50 * time.Millisecond
	}
	q, err := sqlite.NewQueue(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func sendN(t *testing.T, q *sqlite.Queue, n int) {
	t.Helper()
	for i := range n {
		if _, err := q.Send(t.Context(), fmt.Appendf(nil, "m%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// The embedded queue passes the queue conformance suite.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{Open: func(t *testing.T, o queuetest.Options) queue.Queue {
		return openQueue(t, "", sqlite.QueueOptions{VisibilityTimeout: o.Visibility, MaxReceiveCount: o.MaxReceiveCount,
			SweepInterval: 10 * time.Millisecond})
	}})
}

// Claims ride in the embedded queue's transactions (queue.ClaimingReceiver).
func TestQueueClaiming(t *testing.T) {
	queuetest.Claiming(t, queuetest.ClaimingHarness{Open: func(t *testing.T, visibility time.Duration) (queuetest.ClaimingQueue, driver.Store) {
		db := sqlitetest.Open(t, "q.db", sqlite.OpenOptions{})
		q, err := sqlite.NewQueue(db, sqlite.QueueOptions{VisibilityTimeout: visibility, WaitTime: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q, sqlite.NewStore(db)
	}})
}

// The embedded queue keeps the reason code of an entry written before
// codes were a field of their own ("code: detail" in the reason).
func TestDLQEntryWrittenBeforeCodesReadsItsCode(t *testing.T) {
	e := sqlite.DLQEntry{Detail: "conflict: charge id reused"}
	if r := e.Reason(); r.Code != "conflict" || r.Detail != "charge id reused" {
		t.Fatalf("old entry reads as %+v", r)
	}
	e = sqlite.DLQEntry{Code: "invalid", Detail: "not JSON: x"}
	if r := e.Reason(); r.Code != "invalid" || r.Detail != "not JSON: x" {
		t.Fatalf("new entry reads as %+v", r)
	}
}

// Two consumer processes on one file never receive the same delivery.
func TestTwoProcessesOnOneFileShareTheWork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	a := openQueue(t, path, sqlite.QueueOptions{})
	b := openQueue(t, path, sqlite.QueueOptions{})
	sendN(t, a, 200)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for _, q := range []*sqlite.Queue{a, b, a, b} {
		wg.Go(func() {
			for {
				msgs, err := q.Receive(context.Background(), 10)
				if err != nil {
					t.Error(err)
					return
				}
				if len(msgs) == 0 {
					return
				}
				mu.Lock()
				for _, m := range msgs {
					seen[m.ID]++
				}
				mu.Unlock()
				if err := q.Ack(context.Background(), msgs); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 200 {
		t.Fatalf("%d distinct messages received, want 200", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %s received %d times", id, n)
		}
	}
}

func TestMessagesExpireAfterTheirRetention(t *testing.T) {
	q := openQueue(t, "", sqlite.QueueOptions{Name: "exp", Retention: time.Hour, DLQRetention: 3 * time.Hour})
	sendN(t, q, 5)
	msgs, err := q.Receive(t.Context(), 2)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d %v", len(msgs), err)
	}
	for _, m := range msgs {
		if err := q.DeadLetter(t.Context(), m, queue.Reason{Code: "debit_failed", Detail: "declined"}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	check := func(at time.Time, wantMain, wantDLQ int) {
		t.Helper()
		m, d, err := q.Expired(ctx, at)
		if err != nil || m != wantMain || d != wantDLQ {
			t.Fatalf("Expired at +%s = %d, %d (%v), want %d, %d", time.Until(at).Round(time.Minute), m, d, err, wantMain, wantDLQ)
		}
	}
	now := time.Now()
	check(now, 0, 0)
	check(now.Add(2*time.Hour), 3, 0) // past the queue's retention, not the DLQ's
	total := 0
	for {
		m, d, err := q.Expire(ctx, now.Add(2*time.Hour), 2)
		if err != nil || d != 0 {
			t.Fatalf("Expire: %d %d %v", m, d, err)
		}
		if m == 0 {
			break
		}
		total += m
	}
	if d, _ := q.Depth(ctx); total != 3 || d.Waiting+d.InFlight != 0 || d.DLQ != 2 {
		t.Fatalf("expired %d; depth %+v; want 3 expired, 0 and 2 left", total, d)
	}
	m, d, err := q.Expire(ctx, now.Add(4*time.Hour), 100)
	if err != nil || m != 0 || d != 2 {
		t.Fatalf("DLQ expiry: %d %d %v, want 0 and 2", m, d, err)
	}
}
