package charge_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

type quietNotifier52s struct{}

func (quietNotifier52s) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	return nil
}

// Attack 52s: the charge's summary through the queue-bound claim path —
// charge.Service.ClaimRequest written by the claiming receive's
// transaction (the claim SQL's $8), then ProcessDelivery with the bound
// claim — for a new charge, and for an older record (written before
// summaries, IN_PROGRESS, its consumer dead) that the receive reclaims.
// Both end DONE with "2500 INR 7890".
func TestAttack52sTheQueueBoundClaimWritesTheSummary(t *testing.T) {
	db := pgtest.Open(t)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("a52s"), VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := postgres.NewStore(db)
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: g, Debiter: corebanksim.NewLedger(corebanksim.Faults{}), Notifier: quietNotifier52s{}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) charge.Charge {
		return charge.Charge{ID: id, AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	}
	fresh, older := mk(dbtest.Name("A52S-Q-")), mk(dbtest.Name("A52S-Q-old-"))
	// The older record: claimed without a summary an hour ago, never finished.
	req, err := g.ClaimRequest(older.ID, older.Fingerprint(nil))
	if err != nil {
		t.Fatal(err)
	}
	req.Now, req.LeaseUntil = req.Now.Add(-time.Hour), req.Now.Add(-time.Hour+time.Minute)
	if res, err := s.Claim(t.Context(), req); err != nil || !res.Acquired || res.Record.Summary != "" {
		t.Fatalf("the older claim: %+v %v", res, err)
	}
	p := queue.ClaimPolicy{Read: func(m queue.Message) (driver.ClaimRequest, any, bool) {
		var c charge.Charge
		if json.Unmarshal(m.Body, &c) != nil {
			return driver.ClaimRequest{}, nil, false
		}
		req, err := svc.ClaimRequest(c)
		return req, c, err == nil
	}}
	for _, c := range []charge.Charge{fresh, older} {
		body, _ := json.Marshal(c)
		if _, err := q.Send(t.Context(), body, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []queue.Message
	for deadline := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		msgs, err := q.ReceiveClaiming(t.Context(), 2, p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	for _, m := range got {
		c := m.Parsed().(charge.Charge)
		if m.Bound == nil {
			t.Fatalf("%s: received unbound", c.ID)
		}
		if claimed, err := s.Get(t.Context(), c.ID, time.Now()); err != nil || claimed.Summary != "2500 INR 7890" {
			t.Fatalf("%s as the receive claimed it: summary %q, %v", c.ID, claimed.Summary, err)
		}
		if res := svc.ProcessDelivery(t.Context(), c, charge.Delivery{Bound: m.Bound}); res.Outcome != charge.Processed {
			t.Fatalf("%s: %v (%s)", c.ID, res.Outcome, res.Reason)
		}
		if r, err := s.Get(t.Context(), c.ID, time.Now()); err != nil || r.State != driver.StateDone || r.Summary != "2500 INR 7890" {
			t.Fatalf("%s: record %s summary %q (%v); want DONE with 2500 INR 7890", c.ID, r.State, r.Summary, err)
		}
	}
}
