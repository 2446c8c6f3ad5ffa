package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// lostCommit passes batches to the connection and, for the batch that
// ends with the commit, loses the commit's answer after it landed (what a
// deadline or a connection cut at shutdown does).
type lostCommit struct{ postgres.BatchSender }

func (l lostCommit) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br := l.BatchSender.SendBatch(ctx, b)
	if n := len(b.QueuedQueries); n > 0 && b.QueuedQueries[n-1].SQL == "commit" {
		return &lostCommitResults{BatchResults: br, left: n}
	}
	return br
}

type lostCommitResults struct {
	pgx.BatchResults
	left int
}

func (r *lostCommitResults) QueryRow() pgx.Row { r.left--; return r.BatchResults.QueryRow() }

func (r *lostCommitResults) Exec() (pgconn.CommandTag, error) {
	r.left--
	tag, err := r.BatchResults.Exec()
	if r.left == 0 && err == nil {
		return pgconn.CommandTag{}, context.DeadlineExceeded
	}
	return tag, err
}

// A claiming receive whose commit landed though its answer was lost gives
// its claims back and its messages with them: the next receive gets the
// message at once and reclaims it, instead of waiting out the visibility
// and the lease (here a minute each).
func TestAReceiveWhoseCommitAnswerWasLostGivesItsClaimsBack(t *testing.T) {
	q, g, p := claimingQueue(t, pgtest.Open(t), dbtest.Name("lost"))
	if _, err := q.Send(t.Context(), []byte("charge-1"), nil); err != nil {
		t.Fatal(err)
	}
	postgres.WrapConn(q, func(c postgres.BatchSender) postgres.BatchSender { return lostCommit{c} })
	if _, err := q.ReceiveClaiming(t.Context(), 10, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive with its commit's answer lost: err = %v, want the lost answer", err)
	}
	r, err := g.Get(t.Context(), "charge-1")
	if err != nil || r.State != driver.StateInProgress {
		t.Fatalf("record after the lost answer: %+v, %v: want the claim the commit wrote", r, err)
	}
	postgres.WrapConn(q, nil)
	msgs, err := q.ReceiveClaiming(t.Context(), 10, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Bound == nil {
		t.Fatalf("the next receive got %d messages: want the given-back one at once, with its claim", len(msgs))
	}
	_, res, ok := msgs[0].Bound.Claimed()
	if !ok || !res.Acquired || !res.Reclaimed {
		t.Fatalf("claim at the next receive: %+v (ok %v): want it reclaimed at once", res, ok)
	}
}

// A settle group that fails as a whole is tried again member by member:
// one result PostgreSQL cannot store (a NUL in its detail) fails alone,
// and every other result of its group is recorded with its message's
// delete.
func TestASettleGroupThatFailsIsRetriedMemberByMember(t *testing.T) {
	q, g, p := claimingQueue(t, pgtest.Open(t), dbtest.Name("group"))
	const n = 8
	for i := range n {
		if _, err := q.Send(t.Context(), []byte(fmt.Sprintf("charge-%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []queue.Message
	for len(msgs) < n {
		got, err := q.ReceiveClaiming(t.Context(), 10, p)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, got...)
	}
	pending, release := postgres.HoldSettles(q)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range msgs {
		req, res, ok := m.Bound.Claimed()
		if !ok || !res.Acquired {
			t.Fatalf("%s not claimed at receive", m.Body)
		}
		detail := "posted"
		if i == 3 {
			detail = "bank said \x00"
		}
		wg.Go(func() {
			errs[i] = m.Bound.Finish(t.Context(), driver.FinishRequest{Key: req.Key, Token: req.Token, State: driver.StateDone,
				Status: "DEBITED", Detail: detail, Now: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		})
	}
	for pending() < n {
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for i, m := range msgs {
		r, err := g.Get(t.Context(), string(m.Body))
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if errs[i] == nil || r.State != driver.StateInProgress {
				t.Errorf("the result PostgreSQL cannot store: err %v, record %s; want its own error and the claim left", errs[i], r.State)
			}
			continue
		}
		if errs[i] != nil || r.State != driver.StateDone || !m.Bound.Settled() {
			t.Errorf("%s: err %v, record %s, settled %v; want DONE with its message deleted", m.Body, errs[i], r.State, m.Bound.Settled())
		}
	}
	d, err := q.Depth(t.Context())
	if err != nil || d.InFlight != 1 {
		t.Errorf("queue %+v (%v): want only the failed result's message left", d, err)
	}
}

// claimingQueue is the queue name on db with a Guard on its store, and
// a claim policy that claims each body as its key.
func claimingQueue(t *testing.T, db *postgres.DB, name string) (*postgres.Queue, *idempotency.Guard, queue.ClaimPolicy) {
	t.Helper()
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: name, VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(postgres.NewStore(db), idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	return q, g, queue.ClaimPolicy{Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
		req, err := g.ClaimRequest(string(m.Body), "fp")
		return req, err == nil
	}}
}
