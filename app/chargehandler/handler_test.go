package chargehandler_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The exactly-once scenarios over every backend are in
// service/scenariotest; this file checks the one decision table.

// The design's outcome → ack table, written out as the specification the
// code's table must match. The test walks the outcomes the charge package
// names (numbered from 1), so a new outcome without a decision here fails.
func TestEveryOutcomeHasTheDesignsAction(t *testing.T) {
	spec := map[charge.Outcome]consumer.Action{
		charge.Processed: consumer.Ack, charge.DuplicateDone: consumer.Ack,
		charge.DebitFailed: consumer.DeadLetter, charge.DuplicateFailed: consumer.DeadLetter,
		charge.Conflict: consumer.DeadLetter, charge.Invalid: consumer.DeadLetter,
		charge.RetryLater: consumer.Retry, charge.DuplicateInProgress: consumer.Retry, charge.LeaseLost: consumer.Retry,
		charge.Waiting: consumer.Wait,
	}
	named := 0
	for o := charge.Outcome(1); !strings.HasPrefix(o.String(), "outcome("); o++ {
		named++
		want, ok := spec[o]
		if !ok {
			t.Errorf("outcome %v is not in the design's table: decide its ack behaviour and add it", o)
			continue
		}
		if got, ok := chargehandler.Actions[o]; !ok || got != want {
			t.Errorf("Actions[%v] = %v, want %v", o, got, want)
		}
		dec := chargehandler.Decide(charge.Result{Outcome: o, Reason: "why"}, time.Second)
		if dec.Action != want {
			t.Errorf("Decide(%v) = %v, want %v", o, dec.Action, want)
		}
		if want != consumer.Ack && (dec.Reason.Code != queue.Code(o.String()) || dec.Reason.Detail != "why") {
			t.Errorf("Decide(%v) reason %+v, want code %q and the detail", o, dec.Reason, o)
		}
	}
	if named != len(spec) || len(chargehandler.Actions) != len(spec) {
		t.Errorf("the code names %d outcomes and maps %d, the design has %d", named, len(chargehandler.Actions), len(spec))
	}
	if dec := chargehandler.Decide(charge.Result{Outcome: charge.Outcome(99)}, time.Second); dec.Action != consumer.Retry {
		t.Errorf("an unknown outcome is %v, want retry (never acked)", dec.Action)
	}
}

func TestALiveLeaseComesBackJustAfterItCouldExpire(t *testing.T) {
	dec := chargehandler.Decide(charge.Result{Outcome: charge.DuplicateInProgress, RetryAfter: 4 * time.Second}, time.Second)
	if dec.Action != consumer.Retry || dec.RetryAfter != 5*time.Second {
		t.Fatalf("decision %+v, want retry after the lease's rest plus the margin (5s)", dec)
	}
	dec = chargehandler.Decide(charge.Result{Outcome: charge.RetryLater}, time.Second)
	if dec.RetryAfter != 0 {
		t.Fatalf("a plain transient failure waits %v, want the runtime's backoff (0 here)", dec.RetryAfter)
	}
}

// A waiting charge is handled again at its time, never moved toward the
// DLQ; its reason code says what it waits for, whether this delivery
// recorded the wait or found it.
func TestAWaitingChargeWaitsUntilItsTimeWithItsReason(t *testing.T) {
	until := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		status charge.Status
		code   queue.Code
	}{
		{charge.RetryScheduled, "retry_scheduled"},
		{charge.NoticeSent, "notice_lead"},
		{"OUTSIDE_POSTING_WINDOW", "waiting"},
		{"", "waiting"},
	} {
		res := charge.Result{Outcome: charge.Waiting, Status: tt.status, Reason: "why", NotBefore: until, RetryAfter: time.Hour}
		dec := chargehandler.Decide(res, time.Second)
		want := consumer.Decision{Action: consumer.Wait, Until: until, Reason: queue.Reason{Code: tt.code, Detail: "why"}}
		if dec != want {
			t.Errorf("status %q: %+v, want %+v", tt.status, dec, want)
		}
	}
}

// In a queue that claims in its receive's transaction, a WAITING finish
// is never a dead-letter and carries the wait's reason.
func TestClaimPolicySettlesAWaitAsAWait(t *testing.T) {
	h := chargehandler.NewHandler(chargehandler.Options{Service: newService(t), Logger: quiet})
	p := h.ClaimPolicy()
	for _, tt := range []struct {
		f    driver.FinishRequest
		dlq  bool
		code queue.Code
	}{
		{driver.FinishRequest{State: driver.StateDone, Status: "DEBITED"}, false, ""},
		{driver.FinishRequest{State: driver.StateFailed, Status: "FAILED", Detail: "debit declined: ACCOUNT_CLOSED"}, true, "debit_failed"},
		{driver.FinishRequest{State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Detail: "next attempt", NotBefore: time.Now()}, false, "retry_scheduled"},
	} {
		dlq, reason := p.Settle(tt.f)
		if dlq != tt.dlq || reason.Code != tt.code {
			t.Errorf("%s: dead-letter %v reason %+v, want %v %q", tt.f.State, dlq, reason, tt.dlq, tt.code)
		}
	}
}

// declines is a bank that declines every debit with its code.
type declines string

func (d declines) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	return charge.DebitReceipt{}, &charge.DeclineError{Code: string(d)}
}

func newService(t *testing.T) *charge.Service {
	t.Helper()
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: declines("INSUFFICIENT_FUNDS"), Notifier: notifysim.NewRecorder(0, quiet), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// Through Handle: a decline the schedule retries waits until its next
// attempt (retry_scheduled), a redelivery before then waits for the same
// time, and the schedule running out dead-letters the charge; in
// notice-first mode the first delivery waits for the notice's lead.
func TestHandleWaitsForTheScheduleAndTheNotice(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec := notifysim.NewRecorder(0, quiet)
	retry := &charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: 24 * time.Hour, Retries: 1}}, Jitter: charge.NoJitter}
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: declines("INSUFFICIENT_FUNDS"), Notifier: rec, Logger: quiet, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	h := chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: quiet})
	body := []byte(`{"schemaVersion":1,"chargeId":"CHG-H","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`)
	deliver := func() consumer.Decision {
		return h.Handle(t.Context(), &consumer.Delivery{Message: queue.Message{ID: "m1", Body: body}})
	}
	next := storetest.Epoch.Add(24 * time.Hour)
	want := consumer.Decision{Action: consumer.Wait, Until: next, Reason: queue.Reason{Code: "retry_scheduled",
		Detail: "next attempt at 2026-12-01T09:00:00Z (attempt 2 of 2, after INSUFFICIENT_FUNDS)"}}
	if dec := deliver(); dec != want {
		t.Fatalf("first delivery: %+v, want %+v", dec, want)
	}
	clock.Advance(time.Hour)
	if dec := deliver(); dec != want {
		t.Fatalf("a redelivery before the retry: %+v, want %+v", dec, want)
	}
	clock.Advance(23 * time.Hour)
	dec := deliver()
	if dec.Action != consumer.DeadLetter || dec.Reason.Code != "debit_failed" || dec.Reason.Detail != "retries_exhausted: debit declined: INSUFFICIENT_FUNDS" {
		t.Fatalf("the retry: %+v, want dead-lettered retries_exhausted", dec)
	}

	nsvc, err := charge.NewService(charge.Options{Guard: guard, Debiter: declines("INSUFFICIENT_FUNDS"), Notifier: rec, Logger: quiet, NoticeLead: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h = chargehandler.NewHandler(chargehandler.Options{Service: nsvc, Logger: quiet})
	body = []byte(strings.Replace(string(body), "CHG-H", "CHG-N", 1))
	dec = deliver()
	if dec.Action != consumer.Wait || !dec.Until.Equal(clock.Now().Add(48*time.Hour)) || dec.Reason.Code != "notice_lead" || rec.AdvanceCount("CHG-N:advance-notice") != 1 {
		t.Fatalf("notice-first: %+v (notices %d), want a wait of the lead", dec, rec.AdvanceCount("CHG-N:advance-notice"))
	}
}
