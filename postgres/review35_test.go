package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// deadLettered puts n messages on q's DLQ (received once, dead-lettered).
func deadLettered(t *testing.T, q *postgres.Queue, n int) {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		if _, err := q.Send(ctx, []byte(`{"chargeId":"CHG-A35-`+string(rune('0'+i))+`"}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := q.Receive(ctx, n)
	if err != nil || len(msgs) != n {
		t.Fatalf("receive: %d %v", len(msgs), err)
	}
	for _, m := range msgs {
		if err := q.DeadLetter(ctx, m, queue.Reason{Code: queue.CodeMaxReceives, Detail: "attack35"}); err != nil {
			t.Fatal(err)
		}
	}
}

// ATTACK (surface 2/3): a redrive reports an entry as moved that it did
// not move. dlqScan.MoveBack runs "delete … returning body / insert … from
// d" and never looks at how many rows it touched: when the entry left the
// DLQ between the scan's page and the move (an operator's `dlq purge
// --force`, another redrive, retention), nothing is inserted and Redrive
// still counts it Moved (and `redrive` prints the charge under "moved").
// The operator is told the charge is back on the queue and will be
// collected; it is gone. Two redrives at once both report every entry
// moved (the same entry counted twice). Made deterministic with the
// redrive's own Match hook, which runs between the page and the move.
func TestReview35RedriveCountsAnEntryThatLeftTheDLQMeanwhileAsMoved(t *testing.T) {
	db := pgtest.Open(t)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("a35rd"), VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadLettered(t, q, 1)
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{Match: func(e queue.DLQEntry) bool {
		// Another operator purges it (with --force) just now.
		if del, err := q.PurgeDLQ(context.WithoutCancel(t.Context()), []string{e.ID}); err != nil || len(del) != 1 {
			t.Fatalf("the concurrent purge: %v %v", del, err)
		}
		return true
	}})
	d, derr := q.Depth(t.Context())
	if derr != nil {
		t.Fatal(derr)
	}
	if rep.Moved != 0 || (err == nil && d.Waiting != rep.Moved) {
		t.Fatalf("redrive reported moved %d (err %v), but the main queue holds %d and the DLQ %d: an entry that was not moved is reported moved",
			rep.Moved, err, d.Waiting, d.DLQ)
	}
}

// ATTACK (surface 1): the pool_max_conns detection is a regex over the
// whole connection string, so the text "pool_max_conns=" anywhere after a
// '&', '?' or a space counts as the operator sizing the pool — also inside
// a password (URL userinfo allows '&'; a quoted key=value password allows
// spaces). Then Open neither sizes the pool for --receivers nor believes
// MaxConns: it keeps pgx's default (max(4, CPUs)) and, with 4 receivers on
// up to 4 CPUs, refuses to start with "a pool of 4 connections
// (pool_max_conns) is too small" — naming a setting the operator never
// made; with fewer receivers it starts on a pool smaller than PoolFor.
func TestReview35PoolMaxConnsInsideAPasswordIsTakenForASizedPool(t *testing.T) {
	base := dbtest.PostgresURL()
	if !strings.HasPrefix(base, "postgres://postgres@") {
		t.Skip("needs the default test URL (trust authentication, user postgres)")
	}
	rest := strings.TrimPrefix(base, "postgres://postgres@") // 127.0.0.1:5432/test?sslmode=disable
	hostport, dbq, _ := strings.Cut(rest, "/")
	host, port, _ := strings.Cut(hostport, ":")
	dbname, _, _ := strings.Cut(dbq, "?")
	for name, url := range map[string]string{
		"url":       "postgres://postgres:s3cr&pool_max_conns=1@" + rest,
		"key=value": "host=" + host + " port=" + port + " user=postgres dbname=" + dbname + " sslmode=disable password='s3cr pool_max_conns=1'",
	} {
		t.Run(name, func(t *testing.T) {
			db, err := postgres.Open(t.Context(), url, postgres.Options{Schema: dbtest.Schema(t), Receivers: 4})
			if err != nil {
				t.Fatalf("Open with 4 receivers and no pool size set (the text is in the password): %v", err)
			}
			defer db.Close()
			if got, want := db.Pool().Config().MaxConns, postgres.PoolFor(4); got != want {
				t.Fatalf("pool of %d connections, want PoolFor(4) = %d", got, want)
			}
		})
	}
}

// ATTACK (surface 1, issue item 2 "poison is always moved"): a message
// whose attributes are valid JSON but not all strings (written around
// Send, as the too-large rows the suites insert are: another producer, a
// hand fix, '{"origin": 7}') fails the whole receive: receiveIn returns
// "attributes of N: json: cannot unmarshal number …". On the claiming path
// the receive's transaction is rolled back, so the row stays the oldest
// visible one with its receive count unchanged: every later receive picks
// it first and fails the same way, the max-receive sweep never sees it, and
// the consumer (every process on the queue) receives nothing again; the
// good charges behind it are never debited. (On the plain path the failed
// receive still committed: the good messages in its batch are hidden for
// the visibility timeout, burn a receive each, and end on the DLQ as
// max_receives without ever being handed out.) The DLQ reader already
// reads such attributes as none; the receive should too, or dead-letter the
// row with its reason.
func TestReview35AMessageWithNonStringAttributesStopsEveryClaimingReceive(t *testing.T) {
	db := pgtest.Open(t)
	name := dbtest.Name("a35attrs")
	q, _, p := claimingQueue(t, db, name)
	p.Settle = func(driver.FinishRequest) (bool, queue.Reason) { return false, queue.Reason{} }
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes) values ($1, 'charge-poison', '{"origin": 7}')`, name); err != nil {
		t.Fatal(err)
	}
	const good = 3
	for i := range good {
		if _, err := q.Send(t.Context(), []byte(fmt.Sprintf("charge-%03d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	var errs []string
	for range 5 {
		msgs, err := q.ReceiveClaiming(t.Context(), 10, p)
		if err != nil {
			errs = append(errs, err.Error())
		}
		for _, m := range msgs {
			got[string(m.Body)] = true
		}
	}
	for i := range good {
		if !got[fmt.Sprintf("charge-%03d", i)] {
			t.Fatalf("after 5 claiming receives, %d of %d good charges were handed out; the receives failed %d times: %v",
				len(got), good, len(errs), errs[:min(len(errs), 1)])
		}
	}
}

// ATTACK (surface 1, the other way round): pgx decodes a URL's query keys
// (pool%5Fmax_conns=2 is pool_max_conns=2 to it), the regex does not, so a
// pool the operator did size is taken as unsized: Open overwrites it with
// PoolFor(receivers) — more connections per process than the operator
// budgeted against the server's max_connections — and skips the refusal
// of a pool too small for the receivers.
func TestReview35AnEncodedPoolMaxConnsIsOverriddenAndNotChecked(t *testing.T) {
	base := dbtest.PostgresURL()
	if !strings.Contains(base, "?") {
		t.Skip("needs a URL with a query")
	}
	db, err := postgres.Open(t.Context(), base+"&pool%5Fmax_conns=2", postgres.Options{Schema: dbtest.Schema(t), Receivers: 4})
	if err == nil {
		defer db.Close()
		t.Fatalf("pool_max_conns=2 (URL-encoded key) with 4 receivers: opened with a pool of %d (pgx read 2; Open replaced it), want the refusal of a pool under NeedFor(4) = %d",
			db.Pool().Config().MaxConns, postgres.NeedFor(4))
	}
}

// REVIEW 35b: 03343fd reads stored attributes with queue.DecodeAttributes
// on receive ({"origin": 7} reads as origin "7"), but the DLQ scan still
// uses json.Unmarshal into map[string]string, which sets a non-string
// value to "". The sweep (max receives) copies the attributes column to
// the DLQ as it is, so such a message, once redriven, comes back with
// origin "" instead of "7": the redrive rewrites what the receive would
// have handed out.
func TestReview35bRedriveBlanksANonStringAttributeTheReceiveKeeps(t *testing.T) {
	db := pgtest.Open(t)
	name := dbtest.Name("r35battrs")
	q, _, _ := claimingQueue(t, db, name)
	// As the sweep leaves it: the row's own attributes, no dead-letter ones.
	if _, err := db.Pool().Exec(t.Context(), `insert into queue_messages (queue, body, attributes) values ($1, '{"chargeId":"CHG-R35B"}', '{"origin": 7}')`, name+"-dlq"); err != nil {
		t.Fatal(err)
	}
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{})
	if err != nil || rep.Moved != 1 {
		t.Fatalf("redrive: %+v %v", rep, err)
	}
	msgs, err := q.Receive(t.Context(), 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d %v", len(msgs), err)
	}
	if got, want := msgs[0].Attributes["origin"], queue.DecodeAttributes([]byte(`{"origin": 7}`))["origin"]; got != want {
		t.Fatalf("redriven message's origin = %q; the receive reads the same stored attributes as %q", got, want)
	}
}
