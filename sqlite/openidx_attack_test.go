package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// openAt opens a file brought to schema version n (n < 8: before the
// partial index) with a writer, as Open would.
func openAt(t *testing.T, path string, n int) *DB {
	t.Helper()
	raw, err := sql.Open(driverName, dsn(path, OpenOptions{Sync: SyncFull, BusyTimeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	raw.SetMaxOpenConns(8)
	if _, err := migrateTo(t.Context(), raw, n); err != nil {
		t.Fatal(err)
	}
	db := &DB{sql: raw, w: newWriter(raw, 256, 10*time.Second)}
	t.Cleanup(func() { db.Close() })
	return db
}

func indexesOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `select name from sqlite_master where type = 'index' and tbl_name = 'idempotency_records' and sql is not null order by name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

func versionOf(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRowContext(t.Context(), "pragma user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

var attackAt = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// attackStatuses: every status the state machine writes, and the ones
// that look like DEBITED but are not it.
var attackStatuses = []string{"", "DEBITED", "DEBITED_NOTIFICATION_FAILED", "debited", "DEBITED ", " DEBITED", "DEBITED'", "it's DEBITED", "DECLINED", "Debited"}

// seed writes the same rows into db: every state with every status, live
// and expired, leases passed and not, internal keys, with keys that page.
func seed(t *testing.T, db *DB) {
	t.Helper()
	ms := attackAt.UnixMilli()
	i := 0
	for _, st := range driver.States {
		for _, status := range attackStatuses {
			for _, prefix := range []string{"a/", "b/", "_"} {
				for j := range 3 {
					i++
					key := fmt.Sprintf("%s%s-%02d-%d", prefix, st, i, j)
					lease := ms - int64(60_000*(j-1)) // j=0 ahead, 1 now, 2 passed
					expires := ms + 3_600_000
					if j == 2 && i%4 == 0 {
						expires = ms - 1 // past retention
					}
					if _, err := db.sql.ExecContext(t.Context(), `insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
						values (?, ?, 'tok', 'fp', 1, ?, ?, ?, ?, ?, '')`, key, string(st), lease, ms-int64(i), ms-int64(i*7%13), expires, status); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// snapshot is every listing operators read, for every state and status.
func snapshot(t *testing.T, s *Store) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	keys := func(rs []driver.Record) []string {
		var k []string
		for _, r := range rs {
			k = append(k, r.Key+"|"+string(r.State)+"|"+r.Status)
		}
		return k
	}
	for _, now := range []time.Time{attackAt, attackAt.Add(2 * time.Minute)} {
		st, n, err := s.Stuck(ctx, now, 1000)
		if err != nil {
			t.Fatal(err)
		}
		// Oldest lease first; ties in any order (compared as a set).
		for i := 1; i < len(st); i++ {
			if st[i].LeaseUntil.Before(st[i-1].LeaseUntil) {
				t.Errorf("stuck out of lease order: %v", keys(st))
			}
		}
		sk := keys(st)
		slices.Sort(sk)
		fmt.Fprintf(&b, "stuck %v %d %v\n", now, n, sk)
		c, err := s.CountByState(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "count %v\n", c)
		for _, state := range driver.States {
			for _, status := range attackStatuses {
				r, err := s.ListByResult(ctx, state, status, now, 1000)
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i < len(r); i++ {
					if r[i].UpdatedAt.Before(r[i-1].UpdatedAt) {
						t.Errorf("by result out of updated_at order: %v", keys(r))
					}
				}
				rk := keys(r)
				slices.Sort(rk)
				fmt.Fprintf(&b, "byresult %s %q %v\n", state, status, rk)
				for _, prefix := range []string{"", "a/", "_", "b/DONE"} {
					for _, limit := range []int{1, 4, 500} {
						all := pagedKeys(t, s, driver.ListRequest{State: state, Status: status, Prefix: prefix, Limit: limit, Now: now}, 1000, keys)
						fmt.Fprintf(&b, "list %s %q %q %d %v\n", state, status, prefix, limit, all)
					}
				}
			}
		}
	}
	return b.String()
}

// The listings of a store at schema 8 (the partial index) equal those of
// the same rows at schema 7, for every state and status, including
// statuses that look like DEBITED, expiry, internal keys and paging; and
// after Amend moves DONE records into and out of the partial index.
func TestAttackListingsEqualVersion7(t *testing.T) {
	dir := t.TempDir()
	v7 := NewStore(openAt(t, filepath.Join(dir, "v7.db"), 7))
	d8, err := Open(t.Context(), filepath.Join(dir, "v8.db"), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d8.Close() })
	v8 := NewStore(d8)
	seed(t, v7.db)
	seed(t, v8.db)
	compare := func(when string) {
		a, b := snapshot(t, v7), snapshot(t, v8)
		if a != b {
			al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
			for i := range min(len(al), len(bl)) {
				if al[i] != bl[i] {
					t.Fatalf("%s: listings differ:\nv7: %s\nv8: %s", when, al[i], bl[i])
				}
			}
			t.Fatalf("%s: listings differ in length", when)
		}
	}
	compare("seeded")
	// Amend moves DONE records across the predicate, both ways.
	ctx := t.Context()
	for _, s := range []*Store{v7, v8} {
		rows, err := s.db.sql.QueryContext(ctx, `select key, status from idempotency_records where state = 'DONE' and expires_at > ?`, attackAt.UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		type kv struct{ k, s string }
		var todo []kv
		for rows.Next() {
			var x kv
			rows.Scan(&x.k, &x.s)
			todo = append(todo, x)
		}
		rows.Close()
		for _, x := range todo {
			to := "DEBITED"
			if x.s == "DEBITED" {
				to = "DEBITED_NOTIFICATION_FAILED"
			}
			if _, err := s.Amend(ctx, driver.AmendRequest{Key: x.k, Token: "tok", FromStatus: x.s, Status: to, Now: attackAt.Add(time.Second)}); err != nil {
				t.Fatalf("amend %s: %v", x.k, err)
			}
		}
	}
	compare("amended")
	// Integrity of the partial index after the moves.
	var ok string
	if err := v8.db.sql.QueryRowContext(ctx, "pragma integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q %v", ok, err)
	}
}

// The bulk test and the partial index's predicate agree for every status:
// a (DONE, status) query is sent to the partial index exactly when the
// index holds those rows.
func TestAttackBulkAgreesWithThePredicate(t *testing.T) {
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, st := range driver.States {
		for _, status := range attackStatuses {
			var in bool
			if err := db.sql.QueryRowContext(t.Context(), `select (?1 <> 'DONE' or ?2 <> 'DEBITED')`, string(st), status).Scan(&in); err != nil {
				t.Fatal(err)
			}
			if status != "" && in == bulk(st, status) {
				t.Errorf("state %s status %q: in the partial index %v, bulk %v", st, status, in, bulk(st, status))
			}
		}
	}
}

// A file at version 7 with records in every state, upgraded by Open:
// every listing equals the listing before; Existing refuses version 7;
// opening again (serve, not Existing) migrates nothing and leaves the
// bulk out of every index but the primary key and expires_at's.
func TestAttackUpgradeFromVersion7(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v7.db")
	old := openAt(t, path, 7)
	seed(t, old)
	before := snapshot(t, NewStore(old))
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err := Open(ctx, path, OpenOptions{Existing: true}); err == nil {
		db.Close()
		t.Fatal("Existing opened a version-7 file")
	}
	db, err := Open(ctx, path, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, NewStore(db)); after != before {
		t.Error("listings changed by the upgrade")
	}
	want := []string{"idempotency_records_expires_idx", "idempotency_records_open_idx"}
	if got := indexesOf(t, db.sql); !slices.Equal(got, want) {
		t.Errorf("indexes after the upgrade: %v, want %v", got, want)
	}
	db.Close()
	for _, opts := range []OpenOptions{{Existing: true}, {}} {
		again, err := Open(ctx, path, opts)
		if err != nil {
			t.Fatal(err)
		}
		if v := versionOf(t, again.sql); v != len(migrations) {
			t.Errorf("version %d", v)
		}
		if got := indexesOf(t, again.sql); !slices.Equal(got, want) {
			t.Errorf("indexes after opening again (Existing %v): %v, want %v", opts.Existing, got, want)
		}
		again.Close()
	}
}

// A fresh file, opened a second time by serve: still only the primary
// key, expires_at's index and the partial index.
func TestAttackReopenedFreshFileKeepsOnlyThePartialIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fresh.db")
	for range 2 {
		db, err := Open(t.Context(), path, OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := indexesOf(t, db.sql)
		db.Close()
		if want := []string{"idempotency_records_expires_idx", "idempotency_records_open_idx"}; !slices.Equal(got, want) {
			t.Fatalf("indexes: %v, want %v", got, want)
		}
	}
}

// The upgrade to 8 fails part-way (its create index hits a table of that
// name) or cannot start (another process holds the write lock): the file
// stays at 7 with its old indexes, never between.
func TestAttackInterruptedUpgradeStaysAt7(t *testing.T) {
	ctx := t.Context()
	t.Run("fails mid-way", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "v7.db")
		old := openAt(t, path, 7)
		seed(t, old)
		if _, err := old.sql.ExecContext(ctx, `create table idempotency_records_open_idx (x)`); err != nil {
			t.Fatal(err)
		}
		before := indexesOf(t, old.sql)
		old.Close()
		if db, err := Open(ctx, path, OpenOptions{}); err == nil {
			db.Close()
			t.Fatal("the upgrade succeeded despite the clash")
		}
		raw, err := sql.Open(driverName, dsn(path, OpenOptions{Sync: SyncFull, BusyTimeout: time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if v := versionOf(t, raw); v != 7 {
			t.Errorf("version %d after the failed upgrade, want 7", v)
		}
		if got := indexesOf(t, raw); !slices.Equal(got, before) || !slices.Contains(got, "idempotency_records_state_lease_idx") {
			t.Errorf("indexes after the failed upgrade: %v, want %v", got, before)
		}
	})
	t.Run("write lock held", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "v7.db")
		old := openAt(t, path, 7)
		seed(t, old)
		before := indexesOf(t, old.sql)
		conn, err := old.sql.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "begin immediate"); err != nil {
			// the driver may already begin immediate; take the lock by a write
			t.Log(err)
		}
		if _, err := conn.ExecContext(ctx, "update idempotency_records set detail = detail where 0"); err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		db, err := Open(octx, path, OpenOptions{BusyTimeout: 200 * time.Millisecond})
		if err == nil {
			db.Close()
			t.Fatal("upgraded while another process held the write lock")
		}
		conn.ExecContext(ctx, "rollback")
		conn.Close()
		if v := versionOf(t, old.sql); v != 7 {
			t.Errorf("version %d, want 7", v)
		}
		if got := indexesOf(t, old.sql); !slices.Equal(got, before) {
			t.Errorf("indexes %v, want %v", got, before)
		}
	})
}

// With statistics (ANALYZE) on a file of 50,000 DONE-DEBITED and a few
// others, the non-bulk listings still use the partial index and the
// bulk's page walks the primary key.
func TestAttackPlansWithStatistics(t *testing.T) {
	ctx := t.Context()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "stat.db"), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ms := attackAt.UnixMilli()
	if _, err := db.sql.ExecContext(ctx, `with recursive n(i) as (select 1 union all select i+1 from n where i < 50000)
		insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
		select printf('k%06d', i), 'DONE', 't', 'f', 1, ?1, ?1, ?1, ?1 + 3600000, 'DEBITED', '' from n`, ms); err != nil {
		t.Fatal(err)
	}
	for i, st := range []string{"FAILED", "IN_PROGRESS", "WAITING"} {
		for j := range 20 {
			if _, err := db.sql.ExecContext(ctx, `insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
				values (?, ?, 't', 'f', 1, ?, ?, ?, ?, '', '')`, fmt.Sprintf("x%d-%02d", i, j), st, ms-60000, ms, ms, ms+3600000); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.sql.ExecContext(ctx, "analyze"); err != nil {
		t.Fatal(err)
	}
	plan := func(q string, args ...any) string {
		rows, err := db.sql.QueryContext(ctx, "explain query plan "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var p []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			rows.Scan(&id, &parent, &unused, &detail)
			p = append(p, detail)
		}
		return strings.Join(p, "; ")
	}
	now := ms
	for _, tc := range []struct {
		name, sql, index string
		args             []any
	}{
		{"stuck count", stuckCountSQL, "idempotency_records_open_idx", []any{now, now, "_"}},
		{"stuck", stuckSQL, "idempotency_records_open_idx", []any{now, now, "_", 100}},
		{"by result FAILED", listByResultSQL[false], "idempotency_records_open_idx", []any{"FAILED", "", now, 100}},
		{"by result DONE NOTIFY", listByResultSQL[false], "idempotency_records_open_idx", []any{"DONE", "DEBITED_NOTIFICATION_FAILED", now, 100}},
		{"FAILED page", listStateSQL[false], "idempotency_records_open_idx", []any{"FAILED", "", "", 0, "", now, "", 101}},
		{"IN_PROGRESS page", listStateSQL[false], "idempotency_records_open_idx", []any{"IN_PROGRESS", "", "", 0, "", now, "", 101}},
		{"DONE NOTIFY page", listStateSQL[false], "idempotency_records_open_idx", []any{"DONE", "", "", 0, "", now, "DEBITED_NOTIFICATION_FAILED", 101}},
		{"bulk page", listStateSQL[true], "sqlite_autoindex_idempotency_records_1", []any{"DONE", "", "", 0, "", now, "", 101}},
	} {
		// A prepared statement's plan is made without the values: check
		// both the parameterised plan and one with the values bound.
		got := plan(tc.sql, tc.args...)
		if !strings.Contains(got, "USING INDEX "+tc.index) && !strings.Contains(got, "USING COVERING INDEX "+tc.index) {
			t.Errorf("%s: plan %q, want %s", tc.name, got, tc.index)
		}
		if strings.Contains(got, "SCAN idempotency_records") && tc.index != "sqlite_autoindex_idempotency_records_1" {
			t.Errorf("%s: plan %q scans the table", tc.name, got)
		}
	}
	// And the answers: every FAILED one is listed, every stuck one counted.
	s := NewStore(db)
	st, n, err := s.Stuck(ctx, attackAt, 100)
	if err != nil || n != 20 || len(st) != 20 {
		t.Errorf("stuck: %d %d %v", n, len(st), err)
	}
	p, err := s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Limit: 500, Now: attackAt})
	if err != nil || len(p.Records) != 20 {
		t.Errorf("FAILED page: %d %v", len(p.Records), err)
	}
}

// pagedKeys follows req's pages (at most pages of them) and returns every
// record listed, as keys writes it, in order.
func pagedKeys(t *testing.T, s *Store, req driver.ListRequest, pages int, keys func([]driver.Record) []string) []string {
	t.Helper()
	var all []string
	for range pages {
		p, err := s.ListState(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys(p.Records)...)
		if p.Next == "" {
			break
		}
		req.After = p.Next
	}
	return all
}
