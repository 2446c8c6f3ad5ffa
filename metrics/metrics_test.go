package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/queue"
)

func TestReasonLabelIsBounded(t *testing.T) {
	for code, want := range map[queue.Code]string{
		"invalid": "invalid", "conflict": "conflict", "debit_failed": "debit_failed", "duplicate_failed": "duplicate_failed",
		"something new": "other", "": "other", "invalid: x": "other",
	} {
		if got := ReasonLabel(code); got != want {
			t.Errorf("ReasonLabel(%q) = %q, want %q", code, got, want)
		}
	}
}

type fixedDebiter struct{ err error }

func (d fixedDebiter) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	return charge.DebitReceipt{Reference: "R"}, d.err
}

type fixedEnquirer struct{}

func (fixedEnquirer) Enquire(context.Context, string) (charge.Enquiry, error) {
	return charge.Enquiry{State: charge.DebitPosted, Reference: "R"}, nil
}

func TestDebitsAreCountedByWhatTheBankSaid(t *testing.T) {
	m := New()
	for _, err := range []error{
		nil,
		&charge.DeclineError{Code: "ACCOUNT_CLOSED"},
		&charge.BankError{Kind: charge.BankRejected, Status: 401},
		&charge.BankError{Kind: charge.BankRejected, Status: 403},
		&charge.BankError{Kind: charge.BankUnavailable, Status: 503},
	} {
		_, _ = m.Debiter(fixedDebiter{err}).Debit(context.Background(), charge.DebitRequest{})
	}
	_, _ = m.Enquirer(fixedEnquirer{}).Enquire(context.Background(), "K")
	br, err := circuit.New(circuit.Options{Threshold: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.Circuit(br.Status)
	br.Record(errors.New("down"))
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, line := range []string{
		`chargerecovery_debits_total{result="success"} 1`,
		`chargerecovery_debits_total{result="declined"} 1`,
		`chargerecovery_debits_total{result="rejected"} 2`,
		`chargerecovery_debits_total{result="transient"} 1`,
		`chargerecovery_enquiries_total{answer="posted"} 1`,
		`chargerecovery_circuit_state 2`,
		`chargerecovery_circuit_consecutive_failures 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
