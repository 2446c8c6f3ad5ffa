package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

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
	type answer struct {
		rec driver.Record
		err error
	}
	done := make(chan answer, 1)
	go func() {
		rec, err := s.Reopen(ctx, driver.ReopenRequest{Key: key, Token: "tok-mine", Reason: "test", PrevToken: "tok-A",
			Now: now, LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)})
		done <- answer{rec, err}
	}()
	// Wait until our reopen is blocked on the row lock, then commit theirs.
	for waiting := false; !waiting; {
		if err := db.Pool().QueryRow(ctx, `select exists (select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like '%update idempotency_records set%state = ''IN_PROGRESS'', token = $2%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-done:
			t.Fatalf("the reopen did not wait for the row lock: %+v %v", a.rec, a.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if !errors.Is(a.err, driver.ErrNotFailed) || a.rec.State != driver.StateInProgress || a.rec.Token != "tok-other" {
		t.Fatalf("reopen = %s %s (%v), want ErrNotFailed with the record as it is now (IN_PROGRESS tok-other)", a.rec.State, a.rec.Token, a.err)
	}
}
