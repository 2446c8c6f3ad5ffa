// Package integration_test runs the whole consumer through real SQS into the
// real listener with a real DynamoDB table (the emulator that
// scripts/with-moto.sh starts): the Go counterpart of the original
// ChargeRecoveryIT.
package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/corebank"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/notify"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	sqsc   *sqs.Client
	qs     awssqs.Queues
	src    *awssqs.Source
	guard  *idempotency.Guard
	svc    *charge.Service
	ledger *corebank.Ledger

	mu       sync.Mutex
	outcomes map[charge.Outcome]int
}

type setup struct {
	queueVisibility time.Duration
	lease           time.Duration
	faults          corebank.Faults
}

func newEnv(t *testing.T, s setup) *env {
	t.Helper()
	cfg := awstest.Config(t)
	e := &env{sqsc: sqs.NewFromConfig(cfg), ledger: corebank.NewLedger(s.faults), outcomes: map[charge.Outcome]int{}}
	ddb := dynamodb.NewFromConfig(cfg)
	table := awstest.Name("idem")
	if err := awsdynamodb.CreateTable(t.Context(), ddb, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), ddb, table) })
	name := awstest.Name("charges")
	var err error
	e.qs, err = awssqs.CreateQueues(t.Context(), e.sqsc, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq", VisibilityTimeout: s.queueVisibility})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = awssqs.DeleteQueue(context.Background(), e.sqsc, e.qs.URL)
		_ = awssqs.DeleteQueue(context.Background(), e.sqsc, e.qs.DLQURL)
	})
	e.src, err = awssqs.New(e.sqsc, awssqs.Options{QueueURL: e.qs.URL, DLQURL: e.qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store, err := awsdynamodb.New(ddb, table)
	if err != nil {
		t.Fatal(err)
	}
	if s.lease == 0 {
		// Short, so that in-progress duplicates come back soon.
		s.lease = 2 * time.Second
	}
	e.guard, err = idempotency.NewGuard(store, idempotency.Options{Lease: s.lease})
	if err != nil {
		t.Fatal(err)
	}
	e.svc, err = charge.NewService(charge.Options{Guard: e.guard, Debiter: e.ledger, Notifier: notify.NewRecorder(0, nil), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run starts the listener; the returned function stops it gracefully.
func (e *env) run(t *testing.T, opts consumer.Options) func() {
	t.Helper()
	h := chargehandler.NewHandler(chargehandler.Options{Service: e.svc, Logger: quiet, OnResult: func(_ consumer.Message, _ charge.Charge, r charge.Result) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.outcomes[r.Outcome]++
	}})
	opts.Logger = quiet
	rt, err := consumer.New(e.src, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rt.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (e *env) count(o charge.Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.outcomes[o]
}

func (e *env) send(t *testing.T, body string, copies int) {
	t.Helper()
	for range copies {
		if _, err := awssqs.Send(t.Context(), e.sqsc, e.qs.URL, []byte(body), nil); err != nil {
			t.Fatal(err)
		}
	}
}

func event(t *testing.T, c charge.Charge) string {
	t.Helper()
	b, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fee(id, account string) charge.Charge {
	return charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
}

func (e *env) waitEmpty(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, err := awssqs.QueueDepth(t.Context(), e.sqsc, url)
		if err != nil {
			t.Fatal(err)
		}
		if d.Total() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue still holds %+v; outcomes %v", d, e.outcomes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) wantRecord(t *testing.T, id string, state idempotency.State, status charge.Status) {
	t.Helper()
	r, err := e.guard.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("record %s: %v", id, err)
	}
	if r.State != state || r.Status != string(status) {
		t.Fatalf("record %s = %s/%s, want %s/%s", id, r.State, r.Status, state, status)
	}
}

func (e *env) dlq(t *testing.T, want int) []consumer.Message {
	t.Helper()
	src, err := awssqs.New(e.sqsc, awssqs.Options{QueueURL: e.qs.DLQURL, DLQURL: e.qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return awstest.Receive(t, src, want)
}

func TestSameChargeSentFiveTimesIsDebitedOnceAndRecordedDoneOnce(t *testing.T) {
	e := newEnv(t, setup{})
	e.send(t, event(t, fee("CHG-IT-5X", "001234567890")), 5)
	stop := e.run(t, consumer.Options{Concurrency: 5})
	e.waitEmpty(t, e.qs.URL, 30*time.Second)
	stop()
	if got := e.ledger.PostingsByKey(); len(got) != 1 || got["CHG-IT-5X"] != 1 {
		t.Fatalf("ledger = %v, want exactly one debit", got)
	}
	e.wantRecord(t, "CHG-IT-5X", idempotency.StateDone, charge.Debited)
	if e.count(charge.Processed) != 1 {
		t.Fatalf("outcomes = %v", e.outcomes)
	}
}

func TestRedeliveryWhileTheFirstIsStillDebitingIsNotAckedThenDroppedAsDone(t *testing.T) {
	// The queue's visibility (1s) is shorter than the debit (3s), and the
	// runtime's heartbeat is set for a 30s visibility, so SQS redelivers the
	// message to another worker while the first is still debiting. A second
	// copy (a producer retry: another message id, same chargeId) arrives at
	// the same time. When the first worker acks, SQS may or may not delete
	// the message with its older receipt handle (moto does), so the copy is
	// what deterministically comes back after DONE and is dropped.
	e := newEnv(t, setup{queueVisibility: time.Second, lease: 4 * time.Second, faults: corebank.Faults{Latency: 3 * time.Second}})
	e.send(t, event(t, fee("CHG-IT-SLOW", "001234567890")), 2)
	stop := e.run(t, consumer.Options{Concurrency: 4, VisibilityTimeout: 30 * time.Second})
	e.waitEmpty(t, e.qs.URL, 60*time.Second)
	stop()
	if e.count(charge.Processed) != 1 || e.count(charge.DuplicateInProgress) < 2 || e.count(charge.DuplicateDone) < 1 {
		t.Fatalf("outcomes = %v: want one processed, the redelivery and the copy left unacked while in progress, then dropped as done", e.outcomes)
	}
	if calls := e.ledger.Calls("CHG-IT-SLOW"); calls != 1 {
		t.Fatalf("core banking called %d times, want 1", calls)
	}
	e.wantRecord(t, "CHG-IT-SLOW", idempotency.StateDone, charge.Debited)
}

func TestMalformedAndPermanentlyFailingChargesGoToTheDLQWithAReason(t *testing.T) {
	e := newEnv(t, setup{faults: corebank.Faults{DeclineAccounts: map[string]string{"005555555555": "INSUFFICIENT_FUNDS"}}})
	e.send(t, `{"chargeId":"","accountId":"001234567890"}`, 1)
	e.send(t, event(t, fee("CHG-IT-NSF", "005555555555")), 1)
	stop := e.run(t, consumer.Options{})
	e.waitEmpty(t, e.qs.URL, 30*time.Second)
	stop()
	if n := len(e.ledger.Entries()); n != 0 {
		t.Fatalf("ledger has %d entries, want none", n)
	}
	reasons := map[string]string{}
	for _, m := range e.dlq(t, 2) {
		reasons[m.Attributes[awssqs.ReasonAttribute]] = string(m.Body)
	}
	var sawInvalid, sawDeclined bool
	for r := range reasons {
		sawInvalid = sawInvalid || strings.HasPrefix(r, "invalid: invalid charge event: ")
		sawDeclined = sawDeclined || strings.HasPrefix(r, "debit_failed: debit declined: INSUFFICIENT_FUNDS")
	}
	if !sawInvalid || !sawDeclined {
		t.Fatalf("DLQ reasons = %v", reasons)
	}
	e.wantRecord(t, "CHG-IT-NSF", idempotency.StateFailed, charge.Failed)
}

func TestFiftyConcurrentDeliveriesThroughDynamoDBDebitOnce(t *testing.T) {
	e := newEnv(t, setup{faults: corebank.Faults{Latency: 50 * time.Millisecond}})
	c := fee("CHG-IT-RACE", "001234567890")
	var wg sync.WaitGroup
	results := make(chan charge.Outcome, 50)
	start := make(chan struct{})
	for range 50 {
		wg.Go(func() {
			<-start
			results <- e.svc.Process(t.Context(), c, nil).Outcome
		})
	}
	close(start)
	wg.Wait()
	close(results)
	counts := map[charge.Outcome]int{}
	for o := range results {
		counts[o]++
	}
	if counts[charge.Processed] != 1 {
		t.Fatalf("outcomes = %v, want exactly one processed", counts)
	}
	if calls := e.ledger.Calls(c.ID); calls != 1 {
		t.Fatalf("core banking called %d times, want 1", calls)
	}
}

func TestManyChargesWithDuplicatesThroughSQSAndDynamoDB(t *testing.T) {
	e := newEnv(t, setup{})
	const n = 30
	for i := range n {
		e.send(t, event(t, fee(fmt.Sprintf("CHG-IT-%03d", i), "001234567890")), 1+i%3)
	}
	stop := e.run(t, consumer.Options{Concurrency: 16})
	e.waitEmpty(t, e.qs.URL, 60*time.Second)
	stop()
	got := e.ledger.PostingsByKey()
	if len(got) != n {
		t.Fatalf("%d charges debited, want %d", len(got), n)
	}
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s debited %d times", k, c)
		}
	}
}
