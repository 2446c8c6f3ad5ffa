package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestStoreConformance(t *testing.T) {
	s := postgres.NewStore(pgtest.Open(t))
	storetest.Conformance(t, s)
}

// The same suite and histories with every claim written in a queue
// receive's transaction and every finish in the transaction that deletes
// its message (the co-located path): the same state machine, row by row.
func TestStoreConformanceThroughTheQueue(t *testing.T) {
	db := pgtest.Open(t)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("claims"), VisibilityTimeout: 12 * time.Hour,
		WaitTime: 5 * time.Millisecond, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.ConformanceThroughQueue(t, q, postgres.NewStore(db))
}

// Claims ride in the PostgreSQL queue's transactions (queue.ClaimingReceiver).
func TestQueueClaiming(t *testing.T) {
	db := pgtest.Open(t)
	queuetest.Claiming(t, queuetest.ClaimingHarness{Open: func(t *testing.T, visibility time.Duration) (queuetest.ClaimingQueue, driver.Store) {
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("claiming"), VisibilityTimeout: visibility,
			WaitTime: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q, postgres.NewStore(db)
	}})
}

func TestQueueConformance(t *testing.T) {
	db := pgtest.Open(t)
	queuetest.Run(t, queuetest.Harness{Open: func(t *testing.T, o queuetest.Options) queue.Queue {
		q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("q"), VisibilityTimeout: o.Visibility,
			MaxReceiveCount: o.MaxReceiveCount, WaitTime: 100 * time.Millisecond, SweepInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}})
}

// Processes starting together on a new schema migrate it once: the schema
// and the version table are created under the migration lock, so no opener
// fails with a duplicate-key error from a concurrent CREATE … IF NOT EXISTS.
func TestConcurrentOpensOfANewSchemaAllSucceed(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	const n = 12
	for round := range 3 {
		schema := dbtest.Schema(t)
		errs := make(chan error, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				db, err := postgres.Open(t.Context(), dbtest.PostgresURL(), postgres.Options{Schema: schema, MaxConns: 2})
				if err == nil {
					db.Close()
				}
				errs <- err
			}()
		}
		close(start)
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("round %d: open of a new schema by one of %d processes at once: %v", round, n, err)
			}
		}
	}
}

// Under READ COMMITTED a statement that waits for a row lock re-checks its
// condition on the row as committed by the writer it waited for, but the
// row it returns to say why it refused is from its own snapshot, taken
// before. A reopen that waited for a concurrent reopen of the same FAILED
// record must answer "not FAILED" with the record as it now is (IN_PROGRESS
// under the other reopen's token), never with the FAILED record it was
// entitled to reopen (found by the linearizability check).
func TestAReopenThatWaitedForAnotherAnswersWithTheRecordAsItIs(t *testing.T) {
	db := pgtest.Open(t)
	s := postgres.NewStore(db)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := dbtest.Name("CHG-REOPEN/1.a")
	c, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-A", Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if err := s.Finish(ctx, driver.FinishRequest{Key: key, Token: "tok-A", State: driver.StateFailed, Status: "FAILED", Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Another operator's reopen holds the row lock, not yet committed.
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `update idempotency_records set state = 'IN_PROGRESS', token = 'tok-other', reopens = reopens + 1 where key = $1`, key); err != nil {
		t.Fatal(err)
	}
	done := inBackground(func() (driver.Record, error) {
		return s.Reopen(ctx, driver.ReopenRequest{Key: key, Token: "tok-mine", Reason: "test", PrevToken: "tok-A",
			Now: now, LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
	})
	// Wait until our reopen is blocked on the row lock, then commit theirs.
	awaitLockWait(t, db, done, "the reopen",
		`select exists (select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like '%update idempotency_records set%state = ''IN_PROGRESS'', token = $2%')`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if !errors.Is(a.err, driver.ErrNotFailed) || a.res.State != driver.StateInProgress || a.res.Token != "tok-other" {
		t.Fatalf("reopen = %s %s (%v), want ErrNotFailed with the record as it is now (IN_PROGRESS tok-other)", a.res.State, a.res.Token, a.err)
	}
}

// answer is what a statement run in the background answered.
type answer[R any] struct {
	res R
	err error
}

// inBackground runs f in a goroutine; its answer comes on the channel.
func inBackground[R any](f func() (R, error)) <-chan answer[R] {
	done := make(chan answer[R], 1)
	go func() {
		res, err := f()
		done <- answer[R]{res, err}
	}()
	return done
}

// awaitLockWait polls query (true once our statement waits for a row
// lock) until it is true; an answer on done meanwhile means what was
// meant to wait did not.
func awaitLockWait[A any](t *testing.T, db *postgres.DB, done <-chan A, what, query string, args ...any) {
	t.Helper()
	for waiting := false; !waiting; {
		if err := db.Pool().QueryRow(t.Context(), query, args...).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-done:
			t.Fatalf("%s did not wait for the row lock: %+v", what, a)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A claim that waited for the row lock of a concurrent write answers for
// the record that write left, not the one in its snapshot: it resumes a
// record that became WAITING meanwhile (Acquired, not Reclaimed) and
// reclaims one that became IN_PROGRESS (Reclaimed: its work may have had
// its effect). The claim reads the row under its lock for that.
func TestAClaimThatWaitedForAWriteAnswersForTheRecordItReplaced(t *testing.T) {
	db := pgtest.Open(t)
	s := postgres.NewStore(db)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, tc := range []struct {
		name          string
		from          driver.State // the record in the claim's snapshot
		concurrent    string       // what the other transaction writes
		wantReclaimed bool
	}{
		{"became WAITING: resumed", driver.StateInProgress,
			`update idempotency_records set state = 'WAITING', lease_until = $2 where key = $1`, false},
		{"became IN_PROGRESS: reclaimed", driver.StateWaiting,
			`update idempotency_records set state = 'IN_PROGRESS', token = 'tok-other', lease_until = $2 where key = $1`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			key := dbtest.Name("CHG-WAITED/1.a")
			c, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-A", Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			if err != nil || !c.Acquired {
				t.Fatalf("claim: %+v %v", c, err)
			}
			if tc.from == driver.StateWaiting {
				// Waiting until a minute from now: not due in the snapshot.
				if err := s.Finish(ctx, driver.FinishRequest{Key: key, Token: "tok-A", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
					Now: now, ExpiresAt: now.Add(time.Hour), NotBefore: now.Add(time.Minute)}); err != nil {
					t.Fatal(err)
				}
			}
			tx, err := db.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var pid int32
			if err := tx.QueryRow(ctx, `select pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			// The other write leaves the record claimable now.
			if _, err := tx.Exec(ctx, tc.concurrent, key, now.Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			done := inBackground(func() (driver.ClaimResult, error) {
				return s.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-mine", Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
					LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			})
			// Wait until the claim is blocked by the other write, then commit it.
			awaitLockWait(t, db, done, "the claim", `select exists (select 1 from pg_stat_activity where $1 = any(pg_blocking_pids(pid)))`, pid)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-done
			if a.err != nil || !a.res.Acquired || a.res.Reclaimed != tc.wantReclaimed || a.res.Record.Attempt != 2 {
				t.Fatalf("claim = acquired %v reclaimed %v attempt %d (%v), want acquired, reclaimed %v, attempt 2",
					a.res.Acquired, a.res.Reclaimed, a.res.Record.Attempt, a.err, tc.wantReclaimed)
			}
		})
	}
}

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

// A connection string without sslmode verifies the server: the test
// server offers TLS with a certificate no trusted CA signed, which
// sslmode=prefer (the driver's default) would have accepted silently — or
// fallen back to plaintext. A weaker mode works only when written out, and
// says so (SSLMode).
func TestWithoutSSLModeTheServerIsVerified(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	t.Setenv("PGSSLMODE", "")
	explicit := dbtest.PostgresURL()
	if !strings.Contains(explicit, "sslmode=disable") {
		t.Skip("the test database URL is not the local one with sslmode=disable")
	}
	bare := strings.Replace(strings.Replace(explicit, "?sslmode=disable", "", 1), "&sslmode=disable", "", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, conn := range []string{bare, "host=127.0.0.1 port=5432 user=postgres dbname=test"} {
		db, err := postgres.Open(ctx, conn, postgres.Options{Schema: dbtest.Schema(t)})
		if err == nil {
			db.Close()
			t.Fatalf("%q connected to a server whose certificate nobody verified", conn)
		}
		if !strings.Contains(err.Error(), "verify-full") {
			t.Errorf("%q: %v, want the error to say the default is verify-full", conn, err)
		}
	}
	db, err := postgres.Open(ctx, explicit, postgres.Options{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.SSLMode() != "disable" {
		t.Errorf("SSLMode() = %q, want disable", db.SSLMode())
	}
	t.Setenv("PGSSLMODE", "require")
	db2, err := postgres.Open(ctx, bare, postgres.Options{Schema: dbtest.Schema(t)})
	if err != nil {
		t.Fatalf("PGSSLMODE=require: %v", err)
	}
	defer db2.Close()
	if db2.SSLMode() != "require" {
		t.Errorf("SSLMode() = %q under PGSSLMODE=require", db2.SSLMode())
	}
}

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

// lostCommit passes batches to the connection and, for the batch that
// ends with the commit, loses the commit's answer after it landed (what a
// deadline or a connection cut at shutdown does).
type lostCommit struct{ postgres.BatchSender }

func (l lostCommit) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br := l.BatchSender.SendBatch(ctx, b)
	if n := len(b.QueuedQueries); n > 0 && b.QueuedQueries[n-1].SQL == "commit" {
		return &lostCommitResults{BatchResults: br, left: n}
	}
	return br
}

type lostCommitResults struct {
	pgx.BatchResults
	left int
}

func (r *lostCommitResults) QueryRow() pgx.Row { r.left--; return r.BatchResults.QueryRow() }

func (r *lostCommitResults) Exec() (pgconn.CommandTag, error) {
	r.left--
	tag, err := r.BatchResults.Exec()
	if r.left == 0 && err == nil {
		return pgconn.CommandTag{}, context.DeadlineExceeded
	}
	return tag, err
}

// A claiming receive whose commit landed though its answer was lost gives
// its claims back and its messages with them: the next receive gets the
// message at once and reclaims it, instead of waiting out the visibility
// and the lease (here a minute each).
func TestAReceiveWhoseCommitAnswerWasLostGivesItsClaimsBack(t *testing.T) {
	q, g, p := claimingQueue(t, pgtest.Open(t), dbtest.Name("lost"))
	if _, err := q.Send(t.Context(), []byte("charge-1"), nil); err != nil {
		t.Fatal(err)
	}
	postgres.WrapConn(q, func(c postgres.BatchSender) postgres.BatchSender { return lostCommit{c} })
	if _, err := q.ReceiveClaiming(t.Context(), 10, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive with its commit's answer lost: err = %v, want the lost answer", err)
	}
	r, err := g.Get(t.Context(), "charge-1")
	if err != nil || r.State != driver.StateInProgress {
		t.Fatalf("record after the lost answer: %+v, %v: want the claim the commit wrote", r, err)
	}
	postgres.WrapConn(q, nil)
	msgs, err := q.ReceiveClaiming(t.Context(), 10, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Bound == nil {
		t.Fatalf("the next receive got %d messages: want the given-back one at once, with its claim", len(msgs))
	}
	_, res, ok := msgs[0].Bound.Claimed()
	if !ok || !res.Acquired || !res.Reclaimed {
		t.Fatalf("claim at the next receive: %+v (ok %v): want it reclaimed at once", res, ok)
	}
}

// A settle group that fails as a whole is tried again member by member:
// one result PostgreSQL cannot store (a NUL in its detail) fails alone,
// and every other result of its group is recorded with its message's
// delete.
func TestASettleGroupThatFailsIsRetriedMemberByMember(t *testing.T) {
	q, g, p := claimingQueue(t, pgtest.Open(t), dbtest.Name("group"))
	const n = 8
	for i := range n {
		if _, err := q.Send(t.Context(), []byte(fmt.Sprintf("charge-%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []queue.Message
	for len(msgs) < n {
		got, err := q.ReceiveClaiming(t.Context(), 10, p)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, got...)
	}
	pending, release := postgres.HoldSettles(q)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range msgs {
		req, res, ok := m.Bound.Claimed()
		if !ok || !res.Acquired {
			t.Fatalf("%s not claimed at receive", m.Body)
		}
		detail := "posted"
		if i == 3 {
			detail = "bank said \x00"
		}
		wg.Go(func() {
			errs[i] = m.Bound.Finish(t.Context(), driver.FinishRequest{Key: req.Key, Token: req.Token, State: driver.StateDone,
				Status: "DEBITED", Detail: detail, Now: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		})
	}
	for pending() < n {
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for i, m := range msgs {
		r, err := g.Get(t.Context(), string(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if errs[i] == nil || r.State != driver.StateInProgress {
				t.Errorf("the result PostgreSQL cannot store: err %v, record %s; want its own error and the claim left", errs[i], r.State)
			}
			continue
		}
		if errs[i] != nil || r.State != driver.StateDone || !m.Bound.Settled() {
			t.Errorf("%s: err %v, record %s, settled %v; want DONE with its message deleted", m.Body, errs[i], r.State, m.Bound.Settled())
		}
	}
	d, err := q.Depth(t.Context())
	if err != nil || d.InFlight != 1 {
		t.Errorf("queue %+v (%v): want only the failed result's message left", d, err)
	}
}

// claimingQueue is the queue name on db with a Guard on its store, and
// a claim policy that claims each body as its key.
func claimingQueue(t *testing.T, db *postgres.DB, name string) (*postgres.Queue, *idempotency.Guard, queue.ClaimPolicy) {
	t.Helper()
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(postgres.NewStore(db), idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	return q, g, queue.ClaimPolicy{Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
		req, err := g.ClaimRequest(string(m.Body), "fp")
		return req, err == nil
	}}
}
