package sqlite

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// A file at schema version 5 (before WAITING) is upgraded by Open: every
// record is kept as it was, with its indexes, and a record can then wait.
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
	rows := []driver.Record{
		{Key: "in-progress", State: driver.StateInProgress, Token: "t1", Fingerprint: "f1", Attempt: 2, LeaseUntil: at.Add(time.Minute),
			CreatedAt: at, UpdatedAt: at.Add(time.Second), ExpiresAt: at.Add(72 * time.Hour), Generation: 1},
		{Key: "done", State: driver.StateDone, Token: "t2", Fingerprint: "f2", Attempt: 1, LeaseUntil: at, CreatedAt: at, UpdatedAt: at,
			ExpiresAt: at.Add(72 * time.Hour), Status: "DEBITED", Detail: "CBS-1", Generation: 1},
		{Key: "reopened", State: driver.StateFailed, Token: "t3", Fingerprint: "f3", Attempt: 3, LeaseUntil: at, CreatedAt: at,
			UpdatedAt: at.Add(time.Hour), ExpiresAt: at.Add(72 * time.Hour), Status: "FAILED", Detail: "declined",
			Reopens: 1, ReopenedAt: at.Add(30 * time.Minute), ReopenReason: "INC-1", PrevStatus: "FAILED", PrevDetail: "timeout",
			Generation: 2, History: []string{"generation 1: timeout", "generation 2: declined"}},
	}
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
	if notes := db.Notes(); len(notes) != 1 || !strings.HasPrefix(notes[0], "3 record(s) kept before summaries carry none") {
		t.Errorf("the upgrade's notes = %q, want the 3 records without a summary counted", notes)
	}
	s := NewStore(db)
	for _, want := range rows {
		got, err := s.Get(ctx, want.Key, at)
		if err != nil {
			t.Fatalf("Get(%s) after the upgrade: %v", want.Key, err)
		}
		if !sameRecord(got, want) {
			t.Errorf("%s after the upgrade:\n got %+v\nwant %+v", want.Key, got, want)
		}
	}
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
	if want := []string{"idempotency_records_expires_idx", "idempotency_records_state_key_idx", "idempotency_records_state_lease_idx"}; !slices.Equal(indexes, want) {
		t.Errorf("indexes after the upgrade: %v, want %v", indexes, want)
	}
	// The in-progress record (its lease passed) waits, and is resumed.
	now := at.Add(2 * time.Minute)
	if err := s.Finish(ctx, driver.FinishRequest{Key: "in-progress", Token: "t1", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
		Now: now, ExpiresAt: now.Add(72 * time.Hour), NotBefore: now.Add(time.Hour)}); err != nil {
		t.Fatalf("a wait after the upgrade: %v", err)
	}
	later := now.Add(time.Hour)
	res, err := s.Claim(ctx, driver.ClaimRequest{Key: "in-progress", Token: "t4", Fingerprint: "f1", Now: later, LeaseExpiredBy: later,
		LeaseUntil: later.Add(time.Minute), ExpiresAt: later.Add(72 * time.Hour)})
	if err != nil || !res.Acquired || res.Reclaimed || res.Record.Attempt != 3 {
		t.Fatalf("resume after the upgrade: %+v %v, want acquired, not reclaimed, attempt 3", res, err)
	}
	// Opened again: nothing more to migrate.
	again, err := Open(ctx, path, OpenOptions{Existing: true})
	if err != nil {
		t.Fatalf("Existing after the upgrade: %v", err)
	}
	again.Close()
}

func sameRecord(a, b driver.Record) bool {
	return a.Key == b.Key && a.State == b.State && a.Token == b.Token && a.Fingerprint == b.Fingerprint && a.Attempt == b.Attempt &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.Status == b.Status && a.Detail == b.Detail && a.Reopens == b.Reopens && a.ReopenedAt.Equal(b.ReopenedAt) &&
		a.ReopenReason == b.ReopenReason && a.PrevStatus == b.PrevStatus && a.PrevDetail == b.PrevDetail &&
		a.Generation == b.Generation && slices.Equal(a.History, b.History)
}
