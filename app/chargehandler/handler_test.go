package chargehandler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
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

// neverDebits fails the test if a malformed message reaches the bank.
type neverDebits struct{ t *testing.T }

func (n neverDebits) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	n.t.Error("a malformed message was debited")
	return charge.DebitReceipt{}, charge.Permanent(nil)
}

// serve's path for a message whose fields are shifted (an account number
// in each field in turn): dead-lettered as invalid, the field named in the
// reason, and neither the DLQ entry's reason nor the log line holds the
// account number.
func TestShiftedFieldsNeverReachTheDLQReasonOrTheLog(t *testing.T) {
	const account = "445566778899"
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: neverDebits{t}, Notifier: notifysim.NewRecorder(0, quiet), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h := chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: log})
	q := memqueue.New(memqueue.Options{})
	for _, tt := range wiretest.Shifted(account) {
		t.Run(tt.Name, func(t *testing.T) {
			before := len(logs.String())
			if _, err := q.Send(t.Context(), []byte(tt.Body), nil); err != nil {
				t.Fatal(err)
			}
			ms, err := q.Receive(t.Context(), 1)
			if err != nil || len(ms) != 1 {
				t.Fatalf("receive: %v %d", err, len(ms))
			}
			dec := h.Handle(t.Context(), &consumer.Delivery{Message: ms[0]})
			if dec.Action != consumer.DeadLetter || dec.Reason.Code != chargehandler.Code(charge.Invalid) {
				t.Fatalf("decision %+v, want dead-lettered invalid", dec)
			}
			if err := q.DeadLetter(t.Context(), ms[0], dec.Reason); err != nil {
				t.Fatal(err)
			}
			dead, err := q.DLQ().Receive(t.Context(), 1)
			if err != nil || len(dead) != 1 {
				t.Fatalf("DLQ receive: %v %d", err, len(dead))
			}
			if err := q.DLQ().Ack(t.Context(), dead); err != nil {
				t.Fatal(err)
			}
			reason := queue.ReasonFromAttributes(dead[0].Attributes).String()
			line := logs.String()[before:]
			if tt.Field != "" && (!strings.Contains(reason, tt.Field) || !strings.Contains(line, tt.Field)) {
				t.Errorf("the field %s is not named: DLQ reason %q, log %s", tt.Field, reason, line)
			}
			if f := wiretest.Leaks(reason, account); f != "" {
				t.Errorf("the DLQ reason holds the account (%s): %q", f, reason)
			}
			if f := wiretest.Leaks(line, account); f != "" {
				t.Errorf("the log line holds the account (%s): %s", f, line)
			}
		})
	}
}

// debits is a bank that accepts every debit and counts them by charge.
type debits struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *debits) Debit(_ context.Context, r charge.DebitRequest) (charge.DebitReceipt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n[r.IdempotencyKey]++
	return charge.DebitReceipt{Reference: "REF-" + r.IdempotencyKey}, nil
}

func event(id string) string {
	return fmt.Sprintf(`{"schemaVersion":1,"chargeId":%q,"accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`, id)
}

// colocated is the co-located path's setup: a SQLite queue and store in
// one database, a guard over that store, a bank that counts debits and the
// charge service over them.
func colocated(t *testing.T) (*sqlite.Queue, *debits, *charge.Service) {
	t.Helper()
	db := sqlitetest.Open(t, "q.db", sqlite.OpenOptions{})
	q, err := sqlite.NewQueue(db, sqlite.QueueOptions{Name: "charges", VisibilityTimeout: time.Minute, WaitTime: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.NewGuard(sqlite.NewStore(db), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bank := &debits{n: map[string]int{}}
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: bank, Notifier: notifysim.NewRecorder(0, quiet), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return q, bank, svc
}

// On the co-located path (SQLite: the claim written in the receive's
// transaction) each message is parsed once, at its receive, and the
// handler works on that charge, the message's own; a poison message is
// still dead-lettered with its reason, and a message received without a
// claim (Bound nil) is parsed by the handler.
func TestTheColocatedPathParsesEachMessageOnce(t *testing.T) {
	parses := chargehandler.CountParses(t)
	q, bank, svc := colocated(t)
	seen := map[string]string{} // message id → the charge id the handler worked on
	h := chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: quiet,
		OnResult: func(_ context.Context, m queue.Message, c charge.Charge, _ charge.Result) { seen[m.ID] = c.ID }})

	const poison = `{"schemaVersion":1,"chargeId":"CHG-P"` // cut short
	bodies := map[string]string{}                          // message id → body
	for _, b := range []string{event("CHG-1"), event("CHG-2"), event("CHG-3"), poison} {
		id, err := q.Send(t.Context(), []byte(b), nil)
		if err != nil {
			t.Fatal(err)
		}
		bodies[id] = b
	}
	msgs, err := q.ReceiveClaiming(t.Context(), 10, h.ClaimPolicy())
	if err != nil || len(msgs) != 4 {
		t.Fatalf("received %d messages (%v), want 4", len(msgs), err)
	}
	for _, m := range msgs {
		dec := h.Handle(t.Context(), &consumer.Delivery{Message: m})
		body := bodies[m.ID]
		if body == poison {
			if m.Bound != nil || dec.Action != consumer.DeadLetter || dec.Reason.Code != "invalid" || dec.Reason.Detail == "" {
				t.Errorf("the poison message: bound %v, decision %+v, want unclaimed and dead-lettered as invalid with its reason", m.Bound != nil, dec)
			}
			continue
		}
		if m.Bound == nil || dec.Action != consumer.Ack {
			t.Errorf("message %s: bound %v, decision %+v, want claimed at its receive and acked", m.ID, m.Bound != nil, dec)
		}
		if n := parses(body); n != 1 {
			t.Errorf("message %s parsed %d times, want once (at its receive)", m.ID, n)
		}
		if want := "CHG-" + body[strings.Index(body, "CHG-")+4:][:1]; seen[m.ID] != want {
			t.Errorf("message %s was handled as charge %q, want its own, %s", m.ID, seen[m.ID], want)
		}
	}
	for _, id := range []string{"CHG-1", "CHG-2", "CHG-3"} {
		if bank.n[id] != 1 {
			t.Errorf("%s debited %d times, want once", id, bank.n[id])
		}
	}

	// A message received without a claim is parsed by the handler.
	id, err := q.Send(t.Context(), []byte(event("CHG-4")), nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := q.Receive(t.Context(), 10)
	if err != nil || len(plain) != 1 || plain[0].ID != id {
		t.Fatalf("plain receive: %d messages (%v), want CHG-4's", len(plain), err)
	}
	if dec := h.Handle(t.Context(), &consumer.Delivery{Message: plain[0]}); dec.Action != consumer.Ack || seen[id] != "CHG-4" || bank.n["CHG-4"] != 1 {
		t.Errorf("unclaimed CHG-4: decision %+v, handled as %q, debits %d; want acked, CHG-4, one debit", dec, seen[id], bank.n["CHG-4"])
	}
	if n := parses(event("CHG-4")); n != 1 {
		t.Errorf("unclaimed CHG-4 parsed %d times, want once (by the handler)", n)
	}
}

// receiveChargeA sends CHG-A's event on the co-located path and receives it
// claiming; handled is the charge id the handler last worked on.
func receiveChargeA(t *testing.T) (bank *debits, h *chargehandler.Handler, handled *string, msgs []queue.Message, err error) {
	t.Helper()
	q, bank, svc := colocated(t)
	handled = new(string)
	h = chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: quiet,
		OnResult: func(_ context.Context, _ queue.Message, c charge.Charge, _ charge.Result) { *handled = c.ID }})
	if _, err := q.Send(t.Context(), []byte(event("CHG-A")), nil); err != nil {
		t.Fatal(err)
	}
	msgs, err = q.ReceiveClaiming(t.Context(), 10, h.ClaimPolicy())
	return bank, h, handled, msgs, err
}

// A message whose body was replaced after its receive (a copy of one
// message given another's body) is handled as its body says, never as the
// charge parsed for the message it was copied from.
func TestAParsedChargeNeverFollowsAnotherBody(t *testing.T) {
	parses := chargehandler.CountParses(t)
	bank, h, handled, msgs, err := receiveChargeA(t)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("received %d messages (%v), want 1", len(msgs), err)
	}
	m := msgs[0]
	if m.Parsed() == nil {
		t.Fatal("the claiming receive attached nothing to the message it parsed")
	}
	m.Bound = nil // as a copy handed around without its claim
	m.Body = []byte(event("CHG-B"))
	h.Handle(t.Context(), &consumer.Delivery{Message: m})
	if *handled != "CHG-B" || bank.n["CHG-B"] != 1 || bank.n["CHG-A"] != 0 {
		t.Errorf("handled as %q, debits %v; want CHG-B debited once and CHG-A not", *handled, bank.n)
	}
	if n := parses(event("CHG-B")); n != 1 {
		t.Errorf("the new body was parsed %d times, want once", n)
	}
}

// A message whose body was rewritten in place after its receive (same
// slice, same length: another charge's event) is handled as its body now
// says, never as the charge parsed of the bytes it held before: Parsed
// promises nothing when Body is not the bytes the value was read from.
func TestAParsedChargeNeverOutlivesItsBytes(t *testing.T) {
	bank, h, handled, msgs, err := receiveChargeA(t)
	if err != nil || len(msgs) != 1 || msgs[0].Parsed() == nil {
		t.Fatalf("received %d messages (%v), want 1 with what its receive parsed", len(msgs), err)
	}
	m := msgs[0]
	m.Bound = nil
	copy(m.Body, event("CHG-B")) // the same length, in place
	if got := m.Parsed(); got != nil {
		t.Errorf("a body rewritten in place still carries %v", got)
	}
	h.Handle(t.Context(), &consumer.Delivery{Message: m})
	if *handled != "CHG-B" || bank.n["CHG-B"] != 1 || bank.n["CHG-A"] != 0 {
		t.Errorf("handled as %q, debits %v; want CHG-B debited once and CHG-A not", *handled, bank.n)
	}
}
