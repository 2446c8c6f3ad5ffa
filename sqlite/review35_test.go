package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// ATTACK (surfaces 2/3): on SQLite a redrive's move is "insert on the
// queue, then delete from the DLQ", and the delete's row count is never
// looked at. An entry that left the DLQ between the scan's read and the
// move is put on the queue all the same:
//   - purged meanwhile (`dlq purge --force ID`: an operator decided this
//     charge must not be collected, and the audit line says it was
//     deleted): the redrive resurrects it and the consumer debits it;
//   - moved meanwhile by another redrive (two operators at month-end):
//     the entry lands on the queue twice and both redrives report it moved.
//
// Made deterministic with the redrive's Match hook, which runs between
// the scan's page and the move.
func TestReview35RedriveMovesAnEntryThatLeftTheDLQMeanwhile(t *testing.T) {
	for name, meanwhile := range map[string]func(t *testing.T, q *sqlite.Queue, id string){
		"purged": func(t *testing.T, q *sqlite.Queue, id string) {
			if del, err := q.PurgeDLQ(context.WithoutCancel(t.Context()), []string{id}); err != nil || len(del) != 1 {
				t.Fatalf("the concurrent purge: %v %v", del, err)
			}
		},
		"moved by another redrive": func(t *testing.T, q *sqlite.Queue, id string) {
			rep, err := q.Redrive(context.WithoutCancel(t.Context()), queue.RedriveOptions{})
			if err != nil || rep.Moved != 1 {
				t.Fatalf("the concurrent redrive: %+v %v", rep, err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			q := openQueue(t, "", sqlite.QueueOptions{Name: "a35", VisibilityTimeout: time.Minute})
			if _, err := q.Send(t.Context(), []byte(`{"chargeId":"CHG-A35-1"}`), nil); err != nil {
				t.Fatal(err)
			}
			msgs, err := q.Receive(t.Context(), 1)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("receive: %d %v", len(msgs), err)
			}
			if err := q.DeadLetter(t.Context(), msgs[0], queue.Reason{Code: queue.CodeMaxReceives, Detail: "attack35"}); err != nil {
				t.Fatal(err)
			}
			once := false
			rep, err := q.Redrive(t.Context(), queue.RedriveOptions{Match: func(e queue.DLQEntry) bool {
				if !once {
					once = true
					meanwhile(t, q, e.ID)
				}
				return true
			}})
			d, derr := q.Depth(t.Context())
			if derr != nil {
				t.Fatal(derr)
			}
			want := 0 // purged: nothing to collect
			if name != "purged" {
				want = 1 // moved once, by the other redrive
			}
			if d.Waiting != want {
				t.Fatalf("after the redrive (moved %d, err %v) the queue holds %d copies of the charge, want %d", rep.Moved, err, d.Waiting, want)
			}
		})
	}
}

// rawExec runs stmt on the database file at path with a connection of its
// own (a row written around Send: by hand, another tool, an older version).
func rawExec(t *testing.T, path, stmt string, args ...any) {
	t.Helper()
	name := ""
	for _, d := range sql.Drivers() {
		if d == "sqlite" || d == "sqlite3" {
			name = d
		}
	}
	if name == "" {
		t.Fatalf("no SQLite driver registered: %v", sql.Drivers())
	}
	db, err := sql.Open(name, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "pragma busy_timeout = 5000"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), stmt, args...); err != nil {
		t.Fatal(err)
	}
}

// ATTACK (issue item 2, "poison is always moved", on SQLite): a message
// whose attributes column does not decode as string attributes (written
// around Send, like the too-large rows the suites insert by hand:
// '{"origin": 7}') fails the receive ("attributes of …: json: cannot
// unmarshal number"), with every good message the same receive took:
//   - claiming (co-located, the default with the SQLite store): the write
//     transaction rolls back, the row stays the oldest visible message with
//     its receive count unchanged, every later receive picks it first and
//     fails again, and the max-receive sweep never moves it: nothing is
//     handed out again, on every process of the queue;
//   - plain: the update committed, so the good messages are hidden for the
//     visibility timeout and burn a receive each; after MaxReceiveCount they
//     are swept to the DLQ as max_receives without ever being handed out
//     (and the poison with them, under the wrong reason).
//
// This file's other readers already treat a bad column as "loses
// attributes, not the message".
func TestReview35AMessageWithUndecodableAttributesStopsTheGoodOnes(t *testing.T) {
	for _, claiming := range []bool{true, false} {
		t.Run(map[bool]string{true: "claiming", false: "plain"}[claiming], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "q.db")
			db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			q, err := sqlite.NewQueue(db, sqlite.QueueOptions{Name: "charges", VisibilityTimeout: 100 * time.Millisecond,
				MaxReceiveCount: 3, SweepInterval: time.Millisecond, WaitTime: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			g, err := idempotency.NewGuard(sqlite.NewStore(db), idempotency.Options{Lease: time.Minute, SkewMargin: -1})
			if err != nil {
				t.Fatal(err)
			}
			p := queue.ClaimPolicy{
				Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
					req, err := g.ClaimRequest(string(m.Body), "fp")
					return req, err == nil
				},
				Settle: func(driver.FinishRequest) (bool, queue.Reason) { return false, queue.Reason{} },
			}
			rawExec(t, path, `insert into goqite (id, queue, body, attributes, created) values ('m_00attrs', 'charges', cast('charge-poison' as blob), '{"origin": 7}', '2000-01-01T00:00:00.000000000Z')`)
			const good = 3
			for i := range good {
				if _, err := q.Send(t.Context(), fmt.Appendf(nil, "charge-%03d", i), nil); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]bool{}
			var errs []string
			// Each round: a receive, then past the visibility timeout.
			for range 6 {
				var msgs []queue.Message
				var err error
				if claiming {
					msgs, err = q.ReceiveClaiming(t.Context(), 10, p)
				} else {
					msgs, err = q.Receive(t.Context(), 10)
				}
				if err != nil {
					errs = append(errs, err.Error())
				}
				for _, m := range msgs {
					got[string(m.Body)] = true
					_ = q.Ack(t.Context(), []queue.Message{m})
				}
				time.Sleep(150 * time.Millisecond)
			}
			d, err := q.Depth(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for i := range good {
				if !got[fmt.Sprintf("charge-%03d", i)] {
					t.Fatalf("after 6 receives, %d of %d good charges were handed out (queue %d waiting, %d in flight, DLQ %d); the receives failed %d times: %v",
						len(got), good, d.Waiting, d.InFlight, d.DLQ, len(errs), errs[:min(len(errs), 1)])
				}
			}
		})
	}
}
