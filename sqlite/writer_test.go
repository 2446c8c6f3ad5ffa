package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A caller's context ends while its statement runs inside a group commit
// that holds other callers' writes. SQLite answers an interrupted statement
// by rolling back the whole transaction; the writer must never let a
// caller's cancellation reach the shared transaction, and every caller must
// be told the true result of its own write.
func TestCancellationMidStatementDoesNotUndoOtherWrites(t *testing.T) {
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "mid.db"), OpenOptions{Sync: SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.sql.ExecContext(t.Context(), `create table w (k text primary key)`); err != nil {
		t.Fatal(err)
	}
	insert := func(ctx context.Context, k string) error {
		return db.write1(ctx, func(tx *wtx) error {
			_, err := tx.Exec(ctx, `insert into w (k) values (?)`, k)
			return err
		})
	}
	// Hold the writer busy so that everything below lands in one batch.
	release := make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- db.write1(context.Background(), func(*wtx) error { <-release; return nil })
	}()
	time.Sleep(50 * time.Millisecond)

	slowCtx, cancelSlow := context.WithCancel(context.Background())
	results := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	record := func(k string, err error) { mu.Lock(); results[k] = err; mu.Unlock() }
	rows := 3000000 // about half a second
	if raceOn {
		rows = 100000 // about a second and a half under the race detector
	}
	wg.Go(func() {
		// A slow statement that then inserts its row.
		err := db.write1(slowCtx, func(tx *wtx) error {
			_, err := tx.Exec(slowCtx, `insert into w (k)
				select 'slow' from (with recursive c(x) as (select 1 union all select x + 1 from c limit ?) select count(*) from c)`, rows)
			return err
		})
		record("slow", err)
	})
	time.Sleep(20 * time.Millisecond)
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		wg.Go(func() { record(k, insert(context.Background(), k)) })
	}
	time.Sleep(50 * time.Millisecond)
	close(release) // the batch: slow, then the 20 others
	time.Sleep(100 * time.Millisecond)
	cancelSlow() // while the slow statement runs
	wg.Wait()
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}

	for k, told := range results {
		var n int
		if err := db.sql.QueryRowContext(t.Context(), `select count(*) from w where k = ?`, k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		switch {
		case told == nil && n != 1:
			t.Errorf("%s was told its write committed, but it is not in the file", k)
		case told != nil && n != 0:
			t.Errorf("%s was told %v, but its write is in the file", k, told)
		case told != nil && !errors.Is(told, context.Canceled):
			t.Errorf("%s was told %v: another caller's cancellation reached its write", k, told)
		}
	}
	if results["slow"] != nil {
		t.Errorf("the slow write had started when its caller gave up: it must run to the end and report nil, got %v", results["slow"])
	}
}

// Another process holds the file's write lock: the writer waits for it (its
// own short sleeps, not SQLite's busy handler) and its write lands once the
// lock is free; past BusyTimeout it reports SQLITE_BUSY and writes nothing.
func TestWriterWaitsForAnotherProcesssWriteLock(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hold      time.Duration
		busy      time.Duration
		wantWrite bool
	}{
		{"lock freed within the busy timeout", 300 * time.Millisecond, 5 * time.Second, true},
		{"lock held past the busy timeout", 2 * time.Second, 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "busy.db")
			db, err := Open(t.Context(), path, OpenOptions{Sync: SyncNormal, BusyTimeout: tc.busy})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if _, err := db.sql.ExecContext(t.Context(), `create table w (k text primary key)`); err != nil {
				t.Fatal(err)
			}
			other, err := Open(t.Context(), path, OpenOptions{Sync: SyncNormal}) // another process's pool
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })
			tx, err := other.sql.BeginTx(t.Context(), nil) // immediate: takes the write lock
			if err != nil {
				t.Fatal(err)
			}
			go func() { time.Sleep(tc.hold); _ = tx.Rollback() }()
			err = db.write1(t.Context(), func(tx *wtx) error {
				_, err := tx.Exec(t.Context(), `insert into w (k) values ('mine')`)
				return err
			})
			var n int
			if qerr := db.sql.QueryRowContext(t.Context(), `select count(*) from w`).Scan(&n); qerr != nil {
				t.Fatal(qerr)
			}
			if tc.wantWrite && (err != nil || n != 1) {
				t.Fatalf("write after the lock was freed: %v, %d rows; want it landed", err, n)
			}
			if !tc.wantWrite && (!isBusy(err) || n != 0) {
				t.Fatalf("write while the lock stayed held: %v, %d rows; want SQLITE_BUSY and nothing written", err, n)
			}
			// The writer's connection (busy handler off) never goes back to
			// the pool, not even after a failed batch: every pooled
			// connection still waits for a lock. (Seven: the default pool
			// of eight, less the writer's while it holds one.)
			var conns []*sql.Conn
			for range 7 {
				c, err := db.sql.Conn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
				var ms int64
				if err := c.QueryRowContext(t.Context(), "pragma busy_timeout").Scan(&ms); err != nil {
					t.Fatal(err)
				}
				if ms != tc.busy.Milliseconds() {
					t.Fatalf("a pooled connection has busy_timeout %d ms, want %d", ms, tc.busy.Milliseconds())
				}
			}
			for _, c := range conns {
				c.Close()
			}
		})
	}
}
