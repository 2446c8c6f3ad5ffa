package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/memqueue"
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
	tk, _ := br.Allow() // one failed call
	br.Record(tk, errors.New("down"))
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

func TestQueueDepthIsSampledInTheBackgroundNotOnScrape(t *testing.T) {
	m := New()
	calls := make(chan struct{}, 100)
	d := queue.Depth{Waiting: 7, InFlight: 2, DLQ: 3, OldestAge: 90 * time.Second, OldestKnown: true}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.QueueDepth(ctx, 20*time.Millisecond, func(context.Context) (queue.Depth, error) { calls <- struct{}{}; return d, nil }, nil)
	}()
	<-calls
	wants := []string{`chargerecovery_queue_messages{state="waiting"} 7`, `chargerecovery_queue_messages{state="in_flight"} 2`,
		`chargerecovery_queue_messages{state="dlq"} 3`, `chargerecovery_queue_oldest_message_age_seconds 90`}
	has := func(body string) bool {
		for _, w := range wants {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	}
	// A scrape may land in the middle of a sample (its series are set one
	// after another): wait for a whole one.
	deadline := time.Now().Add(5 * time.Second)
	var body string
	for time.Now().Before(deadline) {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body = rec.Body.String()
		if has(body) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Scrapes do not sample: after the sampler stopped, a scrape calls nothing.
	n := len(calls)
	m.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	if len(calls) != n {
		t.Fatal("a scrape sampled the queue")
	}
}

func TestQueueAgeIsAbsentWhereTheQueueCannotTell(t *testing.T) {
	m := New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // one sample, then return
	m.QueueDepth(ctx, time.Hour, func(context.Context) (queue.Depth, error) { return queue.Depth{Waiting: 1}, nil }, nil)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if strings.Contains(rec.Body.String(), "queue_oldest_message_age_seconds") {
		t.Fatal("age gauge exported for a queue that cannot tell it")
	}
}

func TestStuckClaimsGaugeReadsTheLastSample(t *testing.T) {
	m := New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // one sample, then return
	m.StuckClaims(ctx, time.Hour, func(context.Context) (int, error) { return 4, nil }, nil)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "chargerecovery_stuck_claims 4") {
		t.Fatal("stuck_claims gauge missing or wrong")
	}
}

// Every series an alert reads is there, at 0, before the first message:
// a consumer that never handled anything is visible as such.
func TestTheSeriesAlertsReadExistFromTheStart(t *testing.T) {
	m := New()
	m.Notifier(nil, "sns")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, series := range []string{
		`chargerecovery_decisions_total{action="ack"} 0`, `chargerecovery_decisions_total{action="retry"} 0`,
		`chargerecovery_decisions_total{action="dead_letter"} 0`,
		`chargerecovery_dlq_forwards_total{reason="invalid"} 0`, `chargerecovery_dlq_forwards_total{reason="conflict"} 0`,
		`chargerecovery_dlq_forwards_total{reason="debit_failed"} 0`, `chargerecovery_dlq_forwards_total{reason="other"} 0`,
		`chargerecovery_claim_outcomes_total{outcome="conflict"} 0`, `chargerecovery_debits_total{result="rejected"} 0`,
		`chargerecovery_notifications_total{channel="sns",result="failed"} 0`, `chargerecovery_lease_lost_total 0`,
		`chargerecovery_enquiries_total{answer="posted"} 0`, `chargerecovery_queue_calls_total{op="receive"} 0`,
	} {
		if !strings.Contains(rec.Body.String(), series+"\n") {
			t.Errorf("no %s at start", series)
		}
	}
}

// noSendSource is a consumer.Source that cannot send.
type noSendSource struct{ consumer.Source }

// The instrumented source passes the runtime's requeue of a waiting
// message on (consumer.Sender), counting it; over a source that cannot
// send it says so (consumer.ErrCannotSend) and counts nothing.
func TestTheInstrumentedSourceSendsWhereTheQueueCan(t *testing.T) {
	m := New()
	q := memqueue.New(memqueue.Options{})
	s, ok := m.Source(q).(consumer.Sender)
	if !ok {
		t.Fatal("the instrumented source is no consumer.Sender")
	}
	if _, err := s.Send(t.Context(), []byte("b"), map[string]string{queue.NotBeforeAttribute: "2030-01-01T00:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 1 {
		t.Fatalf("queue holds %d, want the message sent", q.Len())
	}
	_, err := m.Source(noSendSource{q}).(consumer.Sender).Send(t.Context(), []byte("b"), nil)
	if !errors.Is(err, consumer.ErrCannotSend) {
		t.Fatalf("send over a source that cannot: %v, want ErrCannotSend", err)
	}
	c, err := m.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if c.QueueCalls["send"] != 1 {
		t.Errorf("send calls counted %d, want 1", c.QueueCalls["send"])
	}
}
