package operate

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// dlqWith is a queue whose DLQ holds body (its entry id returned) and a
// store holding a record of charge id.
func dlqWith(t *testing.T, body, id string) (*memqueue.Queue, *memstore.Store, string) {
	t.Helper()
	ctx := t.Context()
	q := memqueue.New(memqueue.Options{})
	if _, err := q.Send(ctx, []byte(body), nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %d", err, len(msgs))
	}
	if err := q.DeadLetter(ctx, msgs[0], queue.Reason{Code: "INVALID_EVENT", Detail: "bad"}); err != nil {
		t.Fatal(err)
	}
	var entryID string
	if _, err := q.Redrive(ctx, queue.RedriveOptions{DryRun: true, Force: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) { entryID = e.ID }}); err != nil {
		t.Fatal(err)
	}
	s := memstore.New()
	now := time.Now()
	if _, err := s.Claim(ctx, driver.ClaimRequest{Key: id, Token: "t", Fingerprint: "f", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return q, s, entryID
}

// dlq show of an entry whose charge id holds the body's account: the
// record under it (its "charge" line, its JSON chargeId) shows the id as
// the entry does, and is still found (looked up by the id as read).
func TestAttack54MaskDLQShowRecordChargeID(t *testing.T) {
	const id, account = "CHG-001234567890", "001234567890"
	body := `{"schemaVersion":1,"chargeId":"` + id + `","accountId":"` + account + `","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`
	q, s, entryID := dlqWith(t, body, id)
	for _, asJSON := range []bool{false, true} {
		for _, by := range []string{entryID, id} {
			var out bytes.Buffer
			if err := Show(t.Context(), q, s, ShowOptions{ID: by, JSON: asJSON, Out: &out}); err != nil {
				t.Fatalf("show %s: %v", by, err)
			}
			got := out.String()
			if strings.Contains(got, "12345678") {
				t.Errorf("dlq show %s (json %v) shows the account:\n%s", by, asJSON, got)
			}
			if !strings.Contains(got, "CHG-********7890") || !strings.Contains(got, "IN_PROGRESS") {
				t.Errorf("dlq show %s (json %v): want the masked id and the record:\n%s", by, asJSON, got)
			}
		}
	}
}
