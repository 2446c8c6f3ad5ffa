package postgres_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// A schema at version 3 (before WAITING) is upgraded by Open: its records
// are kept as they were, and a record can then wait and be resumed.
func TestOpenUpgradesAVersion3SchemaToWaiting(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	ctx := t.Context()
	schema := dbtest.Schema(t)
	old, err := postgres.OpenAtVersion(ctx, dbtest.PostgresURL(), schema, 3)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	insert := `insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at,
		status, detail, reopens, reopened_at, reopen_reason, prev_status, prev_detail, generation, history)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`
	add := func(r driver.Record) error {
		var reopened *time.Time
		if !r.ReopenedAt.IsZero() {
			reopened = &r.ReopenedAt
		}
		_, err := old.Pool().Exec(ctx, insert, r.Key, string(r.State), r.Token, r.Fingerprint, r.Attempt, r.LeaseUntil, r.CreatedAt,
			r.UpdatedAt, r.ExpiresAt, r.Status, r.Detail, r.Reopens, reopened, r.ReopenReason, r.PrevStatus, r.PrevDetail,
			r.Generation, driver.JoinHistory(r.History))
		return err
	}
	// What version 3 refuses: the reason for migration 4.
	if err := add(driver.Record{Key: "W", State: driver.StateWaiting, Token: "t", Fingerprint: "f", Attempt: 1, LeaseUntil: at,
		CreatedAt: at, UpdatedAt: at, ExpiresAt: at, Generation: 1}); err == nil {
		t.Fatal("a version-3 schema took a WAITING record: the test does not start from the old schema")
	}
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
		if err := add(r); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()

	if _, err := postgres.Open(ctx, dbtest.PostgresURL(), postgres.Options{Schema: schema, Existing: true}); !errors.Is(err, postgres.ErrNotSetUp) {
		t.Fatalf("Existing on a version-3 schema: %v, want ErrNotSetUp (an operator command must not migrate)", err)
	}
	db, err := postgres.Open(ctx, dbtest.PostgresURL(), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatalf("Open of a version-3 schema: %v", err)
	}
	t.Cleanup(db.Close)
	if notes := db.Notes(); len(notes) != 1 || !strings.HasPrefix(notes[0], "3 record(s) kept before summaries carry none") {
		t.Errorf("the upgrade's notes = %q, want the 3 records without a summary counted", notes)
	}
	s := postgres.NewStore(db)
	for _, want := range rows {
		got, err := s.Get(ctx, want.Key, at)
		if err != nil {
			t.Fatalf("Get(%s) after the upgrade: %v", want.Key, err)
		}
		if !sameRecord(got, want) {
			t.Errorf("%s after the upgrade:\n got %+v\nwant %+v", want.Key, got, want)
		}
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
	again, err := postgres.Open(ctx, dbtest.PostgresURL(), postgres.Options{Schema: schema, Existing: true})
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
