package sqlite

import (
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// A file at schema version 5 (before WAITING) is upgraded by Open: every
// record is kept as it was, with the indexes of the latest schema, and a
// record can then wait.
func TestOpenUpgradesAVersion5FileToWaiting(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v5.db")
	old, err := sql.Open(driverName, dsn(path, OpenOptions{Sync: SyncFull, BusyTimeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrateTo(ctx, old, 5); err != nil {
		t.Fatal(err)
	}
	// What version 5 refuses: the reason for migration 6.
	if _, err := old.ExecContext(ctx, `insert into idempotency_records (`+columnsV6+`)
		values ('W', 'WAITING', 't', 'f', 1, 0, 0, 0, 0, '', '', 0, 0, '', '', '', 1, '')`); err == nil {
		t.Fatal("a version-5 file took a WAITING record: the test does not start from the old schema")
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	rows := storetest.UpgradeRecords(at)
	for _, r := range rows {
		reopened := int64(0)
		if !r.ReopenedAt.IsZero() {
			reopened = r.ReopenedAt.UnixMilli()
		}
		if _, err := old.ExecContext(ctx, `insert into idempotency_records (`+columnsV6+`)
			values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.Key, string(r.State), r.Token, r.Fingerprint, r.Attempt, r.LeaseUntil.UnixMilli(), r.CreatedAt.UnixMilli(),
			r.UpdatedAt.UnixMilli(), r.ExpiresAt.UnixMilli(), r.Status, r.Detail, r.Reopens, reopened, r.ReopenReason,
			r.PrevStatus, r.PrevDetail, r.Generation, driver.JoinHistory(r.History)); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	if _, err := Open(ctx, path, OpenOptions{Existing: true}); err == nil {
		t.Fatal("Existing opened a version-5 file; want ErrNotSetUp (an operator command must not migrate)")
	}
	db, err := Open(ctx, path, OpenOptions{})
	if err != nil {
		t.Fatalf("Open of a version-5 file: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	storetest.Upgraded(t, NewStore(db), db.Notes(), rows, at)
	var indexes []string
	ix, err := db.sql.QueryContext(ctx, `select name from sqlite_master where type = 'index' and tbl_name = 'idempotency_records' and sql is not null order by name`)
	if err != nil {
		t.Fatal(err)
	}
	for ix.Next() {
		var n string
		if err := ix.Scan(&n); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, n)
	}
	ix.Close()
	if want := []string{"idempotency_records_expires_idx", "idempotency_records_open_idx"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes after the upgrade: %v, want %v", indexes, want)
	}
	// Opened again: nothing more to migrate.
	again, err := Open(ctx, path, OpenOptions{Existing: true})
	if err != nil {
		t.Fatalf("Existing after the upgrade: %v", err)
	}
	again.Close()
}
