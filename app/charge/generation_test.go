package charge_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

func TestBankKeyPerGeneration(t *testing.T) {
	for _, tt := range []struct {
		id   string
		gen  int
		want string
	}{
		{"CHG-1", 0, "CHG-1"}, {"CHG-1", 1, "CHG-1"}, {"CHG-1", 2, "CHG-1~2"}, {"CHG/2026/11/7", 12, "CHG/2026/11/7~12"},
	} {
		if got := charge.BankKey(tt.id, tt.gen); got != tt.want {
			t.Errorf("BankKey(%q, %d) = %q, want %q", tt.id, tt.gen, got, tt.want)
		}
	}
	// No generation's key is another charge's id: the separator is outside
	// the wire format's alphabet.
	body := []byte(`{"schemaVersion":1,"chargeId":"CHG-1~2","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`)
	if _, err := charge.ParseEvent(body); err == nil {
		t.Fatal("a charge id holding the generation separator was accepted")
	}
}

func TestOnlyAnExplicitDeclineGetsANewGeneration(t *testing.T) {
	decline := &charge.DeclineError{Code: "INSUFFICIENT_FUNDS", Message: "balance too low"}
	for _, tt := range []struct {
		name string
		rec  driver.Record
		ok   bool
	}{
		{"FAILED by a decline", driver.Record{State: driver.StateFailed, Detail: decline.Error()}, true},
		{"FAILED by the last decline of a schedule that ran out", driver.Record{State: driver.StateFailed,
			Detail: (&charge.RetriesExhaustedError{Decline: decline}).Error(), History: []string{"generation 1: declined INSUFFICIENT_FUNDS at 2026-12-01T10:00:00Z; retries exhausted: 1 of 1 debit attempts made"}}, true},
		{"FAILED text that only mentions a schedule", driver.Record{State: driver.StateFailed, Detail: "retries_exhausted: corebank: x"}, false},
		{"WAITING for a retry", driver.Record{State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Detail: "next attempt at 2026-12-02T10:00:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)"}, false},
		{"FAILED by a permanent error of ours", driver.Record{State: driver.StateFailed, Detail: "corebank: missing idempotency key"}, false},
		{"FAILED text that only mentions a decline", driver.Record{State: driver.StateFailed, Detail: "x: debit declined: R"}, false},
		{"DONE", driver.Record{State: driver.StateDone, Detail: decline.Error()}, false},
		{"FAILED by a hard decline (closed account)", driver.Record{State: driver.StateFailed,
			Detail: (&charge.DeclineError{Code: "ACCOUNT_CLOSED", Message: "declined by core banking: account ****1001"}).Error()}, false},
		{"FAILED by a hard decline without a message", driver.Record{State: driver.StateFailed, Detail: (&charge.DeclineError{Code: "MANDATE_CANCELLED"}).Error()}, false},
		{"IN_PROGRESS after an ambiguous answer", driver.Record{State: driver.StateInProgress}, false},
	} {
		if err := charge.EligibleForNewGeneration(tt.rec); (err == nil) != tt.ok {
			t.Errorf("%s: %v, want eligible=%v", tt.name, err, tt.ok)
		}
	}
}
