package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// writer is group commit for one SQLite file: SQLite has a single writer,
// so instead of many goroutines contending for the write lock (and sleeping
// in SQLite's busy handler), one goroutine on one pinned connection runs
// every write of this process. It takes whatever writes are waiting (up to
// maxBatch), runs each in its own SAVEPOINT (one write's failure never
// touches another's), and commits them together: one transaction, one
// fsync for the whole batch. Another process on the same file is still kept
// apart by SQLite's locking (immediate transactions); the writer waits for
// another process's write lock itself (see begin), not in SQLite's busy
// handler.
type writer struct {
	db       *sql.DB
	busy     time.Duration // how long begin waits for another process's write lock
	stmts    stmtCache
	reqs     chan *writeReq
	maxBatch int
	done     chan struct{}
	closeMu  sync.RWMutex
	closed   bool
}

type writeReq struct {
	ctx    context.Context
	single bool // fn makes at most one change, atomic on its own: no savepoint
	fn     func(*wtx) error
	err    error
	done   chan error
}

var errClosed = errors.New("sqlite: database closed")

func newWriter(db *sql.DB, maxBatch int, busy time.Duration) *writer {
	w := &writer{db: db, busy: busy, stmts: stmtCache{db: db, m: map[string]*sql.Stmt{}}, reqs: make(chan *writeReq, maxBatch), maxBatch: maxBatch, done: make(chan struct{})}
	go w.loop()
	return w
}

// do runs fn in a write transaction shared with other writes, and returns
// once that transaction has committed (or fn's own error). A write whose
// ctx ended before its turn is skipped with ctx's error and writes nothing.
// Once started, a write runs to the end whatever happens to ctx: fn's
// statements run on the writer's own context (the ctx fn passes to the wtx
// is ignored), because SQLite answers an interrupted statement by rolling
// back the whole transaction, which holds other callers' writes too. The
// caller is told the true result of its own write.
func (w *writer) do(ctx context.Context, single bool, fn func(*wtx) error) error {
	w.closeMu.RLock()
	if w.closed {
		w.closeMu.RUnlock()
		return errClosed
	}
	r := &writeReq{ctx: ctx, single: single, fn: fn, done: make(chan error, 1)}
	select {
	case w.reqs <- r:
	case <-ctx.Done():
		w.closeMu.RUnlock()
		return ctx.Err()
	}
	w.closeMu.RUnlock()
	return <-r.done
}

func (w *writer) close() {
	w.closeMu.Lock()
	if !w.closed {
		w.closed = true
		close(w.reqs)
	}
	w.closeMu.Unlock()
	<-w.done
	w.stmts.close()
}

func (w *writer) loop() {
	defer close(w.done)
	var conn *sql.Conn
	defer func() {
		if conn != nil {
			drop(conn)
		}
	}()
	batch := make([]*writeReq, 0, w.maxBatch)
	for first := range w.reqs {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < w.maxBatch {
			select {
			case r, ok := <-w.reqs:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		var err error
		if conn == nil {
			conn, err = w.connect()
		}
		if err == nil {
			err = w.run(conn, batch)
		}
		if err != nil && conn != nil {
			drop(conn) // start the next batch on a fresh connection
			conn = nil
		}
		for _, r := range batch {
			if err != nil {
				r.done <- err
			} else {
				r.done <- r.err
			}
		}
	}
}

// connect pins the writer's connection, with SQLite's busy handler off:
// begin waits for the write lock instead.
func (w *writer) connect() (*sql.Conn, error) {
	conn, err := w.db.Conn(context.Background())
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(context.Background(), "pragma busy_timeout = 0"); err != nil {
		drop(conn)
		return nil, err
	}
	return conn, nil
}

// drop closes the writer's connection for good instead of handing it back
// to the pool: with the busy handler off, a reader that got it could fail
// at once where the pool's connections wait.
func drop(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// begin starts the batch's immediate transaction, waiting up to w.busy for
// another process's write lock in short sleeps of random length. SQLite's
// own busy handler sleeps 1, 2, 5, … up to 100 ms between tries and no
// waiter ever gets in line, so with three processes on one file a waiting
// writer mostly slept while others took turns: three `serve` processes
// drained 20,000 charges at 295 charges/s, where one did 3,626.
func (w *writer) begin(conn *sql.Conn) (*sql.Tx, error) {
	deadline := time.Now().Add(w.busy)
	for {
		tx, err := conn.BeginTx(context.Background(), nil)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return tx, err
		}
		time.Sleep(time.Duration(100+rand.IntN(900)) * time.Microsecond)
	}
}

// run executes one batch in one transaction.
func (w *writer) run(conn *sql.Conn, batch []*writeReq) error {
	ctx := context.Background()
	tx, err := w.begin(conn)
	if err != nil {
		return err
	}
	t := &wtx{Tx: tx, stmts: &w.stmts, ctx: ctx}
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		if r.single {
			// One statement: SQLite undoes a failed statement by itself.
			r.err = r.fn(t)
			continue
		}
		if _, err := t.Exec(ctx, "savepoint w"); err != nil {
			_ = tx.Rollback()
			return err
		}
		r.err = r.fn(t)
		if r.err != nil {
			if _, err := t.Exec(ctx, "rollback to w"); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if _, err := t.Exec(ctx, "release w"); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// wtx is the writer's transaction: Exec and QueryRow run cached prepared
// statements (parsing SQL is a large share of SQLite's CPU otherwise), all
// on the writer's context: a caller's cancellation must never interrupt a
// statement of the shared transaction (see writer.do). The ctx argument of
// each method is ignored.
type wtx struct {
	*sql.Tx
	stmts *stmtCache
	ctx   context.Context
}

func (t *wtx) stmt(query string) (*sql.Stmt, error) {
	s, err := t.stmts.get(t.ctx, query)
	if err != nil {
		return nil, err
	}
	return t.Tx.StmtContext(t.ctx, s), nil
}

// Exec runs a cached statement in the transaction.
func (t *wtx) Exec(_ context.Context, query string, args ...any) (sql.Result, error) {
	s, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(t.ctx, args...)
}

// Query runs a cached statement in the transaction.
func (t *wtx) Query(_ context.Context, query string, args ...any) (*sql.Rows, error) {
	s, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(t.ctx, args...)
}

// QueryRow runs a cached statement in the transaction.
func (t *wtx) QueryRow(_ context.Context, query string, args ...any) *sql.Row {
	s, err := t.stmt(query)
	if err != nil {
		return t.Tx.QueryRowContext(t.ctx, query, args...) // reports the same error
	}
	return s.QueryRowContext(t.ctx, args...)
}

// stmtCache holds statements prepared on the pool: database/sql keeps one
// per connection and reuses it when the statement is bound to a
// transaction on that connection.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[query]; ok {
		return s, nil
	}
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = s
	return s, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		s.Close()
	}
	c.m = map[string]*sql.Stmt{}
}
