package postgres_test

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

// A version-4 schema whose key column sorts by a linguistic collation
// (case and accents folded, digits by value) and records in every state,
// with keys whose byte order differs from that collation's, is upgraded by
// two processes at once: afterwards every listing, by state, status and
// prefix, page by page, shows each record it should exactly once, in byte
// order, and a record moved between DONE-DEBITED and a rare status is
// listed under its new one only.
func TestListingAfterTheUpgradeToVersion5(t *testing.T) {
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is unreachable
	ctx := t.Context()
	schema := dbtest.Schema(t)
	old, err := postgres.OpenAtVersion(ctx, dbtest.PostgresURL(), schema, 4)
	if err != nil {
		t.Fatal(err)
	}
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
