package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
)

// A message over the size limit written around Send is never read into
// memory: a receive moves it to the DLQ unread (one statement, body and
// all) with its reason, and hands out the others.
func TestAMessageOverTheLimitIsDeadLetteredUnread(t *testing.T) {
	db := pgtest.Open(t)
	name := dbtest.Name("big")
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: 30 * time.Second, WaitTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const huge = 64 << 20
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes) values ($1, convert_to(repeat('x', $2), 'UTF8'), '{"origin":"batch-7"}')`, name, huge); err != nil {
		t.Fatal(err)
	}
	queuetest.ReceiveBesideHuge(t, q, huge, nil)
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
	db := pgtest.Open(t)
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

// Four claiming receives on a pool of four connections, with messages over
// the size limit among the good ones: every receive that meets one moves it
// to the DLQ in its own transaction (on the connection it holds), so none
// waits for a connection another receive holds. Before, each receive held
// its connection while dead-lettering through the pool: four of them
// waited for each other forever, and nothing was received again.
func TestFourClaimingReceivesOnAPoolOfFourMoveTooLargeMessages(t *testing.T) {
	db := pgtest.With(t, postgres.Options{MaxConns: 4})
	name := dbtest.Name("poison")
	q, _, p := claimingQueue(t, db, name)
	const good, poison = 40, 16
	// Poison first: each receive of four meets some at once.
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes)
		select $1, convert_to(repeat('x', $2), 'UTF8'), '{"origin":"poison"}' from generate_series(1, $3)`, name, queue.MaxMessageBytes+1, poison); err != nil {
		t.Fatal(err)
	}
	for i := range good {
		if _, err := q.Send(t.Context(), []byte(fmt.Sprintf("charge-%03d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				n := len(claimed)
				mu.Unlock()
				if n == good {
					return
				}
				msgs, err := q.ReceiveClaiming(ctx, 2, p)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, m := range msgs {
					if m.Bound == nil {
						errs <- fmt.Errorf("message %s received without its claim", m.ID)
					}
					claimed[string(m.Body)]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("receive: %v", err)
	}
	if len(claimed) != good {
		t.Fatalf("the four receives claimed %d of %d good messages before the deadline: stuck", len(claimed), good)
	}
	for body, n := range claimed {
		if n != 1 {
			t.Errorf("%s received %d times, want once", body, n)
		}
	}
	d, err := q.Depth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.DLQ != poison || d.Waiting != 0 {
		t.Errorf("queue %+v: want all %d messages over the limit on the DLQ and nothing waiting", d, poison)
	}
}
