package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/sqlite"
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
		if _, err := q.Send(t.Context(), fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func depth(t *testing.T, q *sqlite.Queue) (int, int) {
	t.Helper()
	m, d, err := q.Depth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m, d
}

func TestReceiveIsBatchedOldestFirstAndAckDeletes(t *testing.T) {
	q := openQueue(t, "", sqlite.QueueOptions{})
	sendN(t, q, 12)
	msgs, err := q.Receive(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 10 || string(msgs[0].Body) != "m0" || msgs[0].ReceiveCount != 1 || msgs[0].SentAt.IsZero() {
		t.Fatalf("first batch: %d messages, first %+v", len(msgs), msgs[0])
	}
	if err := q.Ack(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	if m, _ := depth(t, q); m != 2 {
		t.Fatalf("depth after acking 10 of 12 = %d", m)
	}
}

func TestInvisibleUntilTimeoutThenRedeliveredWithCount(t *testing.T) {
	q := openQueue(t, "", sqlite.QueueOptions{VisibilityTimeout: 200 * time.Millisecond})
	sendN(t, q, 1)
	first, _ := q.Receive(t.Context(), 10)
	if len(first) != 1 {
		t.Fatal("no message")
	}
	if again, _ := q.Receive(t.Context(), 10); len(again) != 0 {
		t.Fatal("an in-flight message was delivered twice")
	}
	time.Sleep(250 * time.Millisecond)
	again, err := q.Receive(t.Context(), 10)
	if err != nil || len(again) != 1 || again[0].ReceiveCount != 2 || again[0].Receipt == first[0].Receipt {
		t.Fatalf("redelivery %+v err %v", again, err)
	}
	// The first delivery's receipt is stale now: it cannot ack or extend.
	var be *consumer.BatchError
	if err := q.Ack(t.Context(), first); !errors.As(err, &be) || len(be.Failed) != 1 {
		t.Fatalf("stale ack: err %v", err)
	}
	if err := q.ChangeVisibility(t.Context(), first[0], time.Hour); !errors.Is(err, sqlite.ErrStaleReceipt) {
		t.Fatalf("stale visibility change: err %v", err)
	}
	if err := q.Ack(t.Context(), again); err != nil {
		t.Fatal(err)
	}
}

func TestChangeVisibilityZeroRedeliversAtOnce(t *testing.T) {
	q := openQueue(t, "", sqlite.QueueOptions{VisibilityTimeout: time.Hour})
	sendN(t, q, 1)
	m, _ := q.Receive(t.Context(), 1)
	if err := q.ChangeVisibility(t.Context(), m[0], 0); err != nil {
		t.Fatal(err)
	}
	again, _ := q.Receive(t.Context(), 1)
	if len(again) != 1 || again[0].ReceiveCount != 2 {
		t.Fatalf("after visibility 0: %+v", again)
	}
}

func TestDeadLetterMovesBodyAndReasonAtomically(t *testing.T) {
	q := openQueue(t, "", sqlite.QueueOptions{})
	if _, err := q.Send(t.Context(), []byte(`{"broken"`)); err != nil {
		t.Fatal(err)
	}
	m, _ := q.Receive(t.Context(), 1)
	if err := q.DeadLetter(t.Context(), m[0], "invalid: not JSON"); err != nil {
		t.Fatal(err)
	}
	if main, dlq := depth(t, q); main != 0 || dlq != 1 {
		t.Fatalf("depth main %d dlq %d", main, dlq)
	}
	entries, order, err := q.DLQEntries(t.Context(), 10)
	if err != nil || len(order) != 1 {
		t.Fatalf("DLQ: %v %v", order, err)
	}
	e := entries[order[0]]
	if string(e.Body) != `{"broken"` || e.Reason != "invalid: not JSON" || e.SourceID != m[0].ID || e.ReceiveCount != 1 {
		t.Fatalf("DLQ entry = %+v", e)
	}
}

func TestExhaustedMessagesAreRedrivenToTheDLQ(t *testing.T) {
	q := openQueue(t, "", sqlite.QueueOptions{MaxReceiveCount: 2, SweepInterval: time.Millisecond})
	sendN(t, q, 1)
	for range 2 {
		m, _ := q.Receive(t.Context(), 1)
		if len(m) != 1 {
			t.Fatal("no message")
		}
		if err := q.ChangeVisibility(t.Context(), m[0], 0); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := q.Receive(t.Context(), 1); len(m) != 0 {
		t.Fatalf("received a third time: %+v", m)
	}
	if main, dlq := depth(t, q); main != 0 || dlq != 1 {
		t.Fatalf("depth main %d dlq %d, want the message in the DLQ", main, dlq)
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
		if err := q.DeadLetter(t.Context(), m, "debit_failed: declined"); err != nil {
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
	if main, dl, _ := q.Depth(ctx); total != 3 || main != 0 || dl != 2 {
		t.Fatalf("expired %d; queue %d, DLQ %d; want 3 expired, 0 and 2 left", total, main, dl)
	}
	m, d, err := q.Expire(ctx, now.Add(4*time.Hour), 100)
	if err != nil || m != 0 || d != 2 {
		t.Fatalf("DLQ expiry: %d %d %v, want 0 and 2", m, d, err)
	}
}
