package postgres_test

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// openAtVersion opens a schema of the test's own set up only to version,
// as an older release left it, and returns it with the schema's name.
func openAtVersion(t *testing.T, version int) (*postgres.DB, string) {
	t.Helper()
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	schema := dbtest.Schema(t)
	old, err := postgres.OpenAtVersion(t.Context(), dbtest.PostgresURL(), schema, version)
	if err != nil {
		t.Fatal(err)
	}
	return old, schema
}

// A schema at version 3 (before WAITING) is upgraded by Open: its records
// are kept as they were, and a record can then wait and be resumed.
func TestOpenUpgradesAVersion3SchemaToWaiting(t *testing.T) {
	ctx := t.Context()
	old, schema := openAtVersion(t, 3)
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
	rows := storetest.UpgradeRecords(at)
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
	storetest.Upgraded(t, postgres.NewStore(db), db.Notes(), rows, at)
	again, err := postgres.Open(ctx, dbtest.PostgresURL(), postgres.Options{Schema: schema, Existing: true})
	if err != nil {
		t.Fatalf("Existing after the upgrade: %v", err)
	}
	again.Close()
}

// A version-4 schema whose key column sorts by a linguistic collation
// (case and accents folded, digits by value) and records in every state,
// with keys whose byte order differs from that collation's, is upgraded by
// two processes at once: afterwards every listing, by state, status and
// prefix, page by page, shows each record it should exactly once, in byte
// order, and a record moved between DONE-DEBITED and a rare status is
// listed under its new one only.
func TestListingAfterTheUpgradeToVersion5(t *testing.T) {
	ctx := t.Context()
	old, schema := openAtVersion(t, 4)
	if _, err := old.Pool().Exec(ctx, `alter table idempotency_records alter column key type text collate "en-x-icu"`); err != nil {
		t.Skipf("no ICU collation to start from: %v", err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	keys := []string{"a", "A", "b", "B", "e", "é", "É", "ée", "f", "z", "Z", "10", "9", "~x", "~", "a~", "a%", "a_", "ab", "aB", "Ab", "ü", "u"}
	states := []struct {
		state  driver.State
		status string
	}{{driver.StateDone, "DEBITED"}, {driver.StateDone, "DEBITED_NOTIFICATION_FAILED"}, {driver.StateFailed, "FAILED"},
		{driver.StateInProgress, ""}, {driver.StateWaiting, "RETRY_SCHEDULED"}}
	var all []driver.Record
	for i, k := range keys {
		for j, s := range states {
			if (i+j)%2 == 0 && j != 0 {
				continue
			}
			key := k + "-" + string(rune('0'+j))
			r := driver.Record{Key: key, State: s.state, Status: s.status, Token: "t", Fingerprint: "f", Attempt: 1,
				LeaseUntil: at, CreatedAt: at, UpdatedAt: at, ExpiresAt: at.Add(72 * time.Hour), Generation: 1}
			if _, err := old.Pool().Exec(ctx, `insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until,
				created_at, updated_at, expires_at, status) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
				r.Key, string(r.State), r.Token, r.Fingerprint, r.Attempt, r.LeaseUntil, r.CreatedAt, r.UpdatedAt, r.ExpiresAt, r.Status); err != nil {
				t.Fatal(err)
			}
			all = append(all, r)
		}
	}
	old.Close()
	var wg sync.WaitGroup
	dbs := make([]*postgres.DB, 2)
	errs := make([]error, 2)
	for i := range dbs {
		wg.Go(func() { dbs[i], errs[i] = postgres.Open(ctx, dbtest.PostgresURL(), postgres.Options{Schema: schema}) })
	}
	wg.Wait()
	for i, db := range dbs {
		if errs[i] != nil {
			t.Fatalf("process %d migrating: %v", i, errs[i])
		}
		t.Cleanup(db.Close)
	}
	s := postgres.NewStore(dbs[0])
	now := at.Add(time.Hour)
	check := func(what string) {
		t.Helper()
		for _, st := range states {
			for _, status := range []string{"", st.status} {
				for _, prefix := range []string{"", "a", "A", "é", "e", "~", "1", "a%", "ü"} {
					req := driver.ListRequest{State: st.state, Status: status, Prefix: prefix, Now: now}
					var want []string
					for _, r := range all {
						if req.Listed(r) {
							want = append(want, r.Key)
						}
					}
					sort.Strings(want)
					for _, limit := range []int{1, 2, 3, 50} {
						req.Limit, req.After = limit, ""
						var got []string
						for range 200 {
							p, err := s.ListState(ctx, req)
							if err != nil {
								t.Fatal(err)
							}
							for _, r := range p.Records {
								got = append(got, r.Key)
							}
							if p.Next == "" {
								break
							}
							req.After = p.Next
						}
						if !slices.Equal(got, want) {
							t.Errorf("%s: %s status %q prefix %q limit %d:\n got %q\nwant %q", what, st.state, status, prefix, limit, got, want)
						}
					}
				}
			}
		}
	}
	check("after the upgrade")
	// DONE-DEBITED to a rare status and back (Amend), keys from both sides.
	for i := range all {
		r := &all[i]
		if r.State != driver.StateDone || !strings.HasPrefix(r.Key, "a") && !strings.HasPrefix(r.Key, "é") {
			continue
		}
		to := "DEBITED"
		if r.Status == "DEBITED" {
			to = "DEBITED_NOTIFICATION_FAILED"
		}
		if _, err := dbs[1].Pool().Exec(ctx, `update idempotency_records set status = $2 where key = $1`, r.Key, to); err != nil {
			t.Fatal(err)
		}
		r.Status = to
	}
	check("after moving records between statuses")
}
