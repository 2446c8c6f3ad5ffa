package chargehandler_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

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
