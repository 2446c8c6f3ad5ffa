package sqlite_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

// Attack 52s: a summary longer than driver.MaxSummaryBytes through the
// claim a queue writes in its receive's transaction (queue.ClaimPolicy):
// the Guard refuses such a summary before it claims (DoOptions.Summary);
// the claiming receive must not write it either. The message is received
// unbound, and the Guard's own claim refuses it.
func TestAttack52sClaimingReceiveRefusesAnOverlongSummary(t *testing.T) {
	db := sqlitetest.Open(t, "q.db", sqlite.OpenOptions{})
	q, err := sqlite.NewQueue(db, sqlite.QueueOptions{VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := sqlite.NewStore(db)
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", driver.MaxSummaryBytes+1)
	p := queue.ClaimPolicy{Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
		req, err := g.ClaimRequest(string(m.Body), "fp")
		req.Summary = long
		return req, err == nil
	}}
	if _, err := q.Send(t.Context(), []byte("A52S-LONG"), nil); err != nil {
		t.Fatal(err)
	}
	var msgs []queue.Message
	for deadline := time.Now().Add(5 * time.Second); len(msgs) == 0 && time.Now().Before(deadline); {
		if msgs, err = q.ReceiveClaiming(t.Context(), 1, p); err != nil {
			t.Fatal(err)
		}
	}
	if len(msgs) != 1 {
		t.Fatalf("received %d messages", len(msgs))
	}
	if rec, err := s.Get(t.Context(), "A52S-LONG", time.Now()); err == nil {
		t.Fatalf("the receive wrote a claim with a summary of %d bytes (at most %d)", len(rec.Summary), driver.MaxSummaryBytes)
	}
	_, err = g.Do(t.Context(), "A52S-LONG", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		t.Fatal("the work ran")
		return idempotency.Done{}, nil
	}, idempotency.DoOptions{Bound: msgs[0].Bound, Summary: long})
	if !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("Do with the over-long summary: %v, want ErrInvalid", err)
	}
}
