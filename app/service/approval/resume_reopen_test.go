package approval_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// dieAfterExecute is a run that dies after the executor acted on its
// batch and before Book.Run saved the outcomes: the real Backend.Execute,
// then a panic (the process gone), which Run does not recover.
type dieAfterExecute struct{ be approval.Backend }

type died struct{}

func (d dieAfterExecute) Execute(ctx context.Context, p approval.Proposal, batch []approval.Target, who approval.Actor) map[string]approval.Outcome {
	d.be.Execute(ctx, p, batch, who)
	panic(died{})
}

// chargeWorld is one charge, delivered through the real charge.Service
// over a memstore, a memqueue (with its DLQ) and a bank that declines
// every debit of its account.
type chargeWorld struct {
	q      *memqueue.Queue
	store  *memstore.Store
	ledger *corebanksim.Ledger
	svc    *charge.Service
}

func newChargeWorld(t *testing.T) *chargeWorld {
	t.Helper()
	w := &chargeWorld{q: memqueue.New(memqueue.Options{DLQ: memqueue.New(memqueue.Options{})}), store: memstore.New(),
		ledger: corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{"001234567890": "INSUFFICIENT_FUNDS"}})}
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if w.svc, err = charge.NewService(charge.Options{Guard: g, Debiter: w.ledger, Notifier: notifyNothing{}, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	return w
}

type notifyNothing struct{}

func (notifyNothing) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	return nil
}

// deliver receives every message on the queue and settles it as serve
// does (chargehandler.Decide): ack, or dead-letter with the outcome's code.
func (w *chargeWorld) deliver(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	for w.q.Len() > 0 {
		msgs, err := w.q.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			c, err := charge.ParseEvent(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			dec := chargehandler.Decide(w.svc.Process(ctx, c, nil), 0)
			switch dec.Action {
			case consumer.Ack:
				err = w.q.Ack(ctx, []queue.Message{m})
			case consumer.DeadLetter:
				err = w.q.DeadLetter(ctx, m, dec.Reason)
			default:
				t.Fatalf("%s: %+v", c.ID, dec)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An approved reopen --new-attempt whose run dies after the reopen and its
// redrive, before the outcome is saved; meanwhile the redriven message is
// delivered, generation 2 is debited and declined (FAILED again). The
// resumed run must not reopen it again: one approval, one re-presentment.
func TestAResumedReopenDoesNotReopenARecordChangedSince(t *testing.T) {
	ctx := t.Context()
	w := newChargeWorld(t)
	c := charge.Charge{ID: "CHG-RESUME", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	body, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.q.Send(ctx, body, nil); err != nil {
		t.Fatal(err)
	}
	w.deliver(t) // generation 1: declined, FAILED, dead-lettered
	if rec, err := w.store.Get(ctx, c.ID, time.Now()); err != nil || rec.State != driver.StateFailed {
		t.Fatalf("generation 1: %+v %v", rec, err)
	}

	path := filepath.Join(t.TempDir(), "audit.jsonl")
	trail, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trail.Close() })
	pol, _ := approval.ParsePolicy("reopen-new-attempt")
	book, err := approval.Open(trail, approval.Options{Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-50: salary credited", ChargeIDs: []string{c.ID}}
	targets := selectTargets(t, be, spec, time.Now(), 1)
	p, err := book.Propose(olga, spec, targets)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := book.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}

	// The run reopens (generation 2) and redrives, then dies before saving.
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(died); !ok {
					panic(r)
				}
			}
		}()
		_, err := book.Run(ctx, p.ID, olga, dieAfterExecute{be}, nil)
		t.Fatalf("the run was to die: %v", err)
	}()
	// Meanwhile the redriven message is delivered: generation 2 declined.
	w.deliver(t)
	if rec, err := w.store.Get(ctx, c.ID, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Generation != 2 {
		t.Fatalf("generation 2: %+v %v", rec, err)
	}

	// The run is resumed; then an operator's plain redrive of the DLQ
	// and the deliveries of whatever is on the queue.
	p, err = book.Run(ctx, p.ID, olga, be, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.deliver(t)
	if _, err := w.q.Redrive(ctx, operate.RedriveAt(time.Now(), idempotency.DefaultRetention)); err != nil {
		t.Fatal(err)
	}
	w.deliver(t)

	if n := w.ledger.Calls(c.ID + "~2"); n != 1 {
		t.Errorf("%d debit requests under %s~2, want 1", n, c.ID)
	}
	if n := w.ledger.Calls(c.ID + "~3"); n != 0 {
		t.Errorf("%d debit request(s) under %s~3: one approval re-presented the charge twice", n, c.ID)
	}
	rec, err := w.store.Get(ctx, c.ID, time.Now())
	if err != nil || rec.State != driver.StateFailed || rec.Generation != 2 {
		t.Errorf("the record is %s at generation %d (%v), want FAILED at generation 2", rec.State, rec.Generation, err)
	}
	o := p.Outcomes[targets[0].Key()]
	if o.Result != "skipped" || !strings.Contains(o.Why, "changed since the proposal (state FAILED, generation 2)") {
		t.Errorf("the target's outcome is %+v, want skipped: changed since the proposal", o)
	}
	es, err := trail.Recent(1000, audit.Filter{Proposal: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Action == "batch" && len(e.Charges) > 0 {
			t.Errorf("an audit line says the approval reopened %v again: %+v", e.Charges, e)
		}
	}
}

// oneToReopen is a world of one FAILED charge, a book under policy and a
// spec (INC-50) that reopens it with a new attempt, and its one target.
func oneToReopen(t *testing.T, policy string) (*world, *approval.Book, approval.Spec, []approval.Target) {
	t.Helper()
	w := newWorld(t, 1)
	book := w.book(t, policy, approval.Options{})
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-50"}
	return w, book, spec, w.selectTargets(t, spec, time.Now(), 1)
}

// A run resumed after one that died between its reopen and saving the
// outcome, with nothing delivered meanwhile, recognises its own reopen
// (the record under the proposal's token) and only redrives.
func TestAResumedReopenFinishesItsOwnReopen(t *testing.T) {
	ctx := t.Context()
	w, book, spec, targets := oneToReopen(t, "reopen-new-attempt")
	p, _ := book.Propose(olga, spec, targets)
	if _, err := book.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	// The earlier run reopened, and died before its redrive.
	g, _ := idempotency.NewGuard(w.store, idempotency.Options{})
	if _, err := g.Reopen(ctx, targets[0].ChargeID, "INC-50", idempotency.ReopenOptions{NewGeneration: true,
		PrevToken: targets[0].RecordToken, Token: approval.ReopenToken(p.ID, targets[0])}); err != nil {
		t.Fatal(err)
	}
	p, err := book.Run(ctx, p.ID, olga, w.be, nil)
	if err != nil || p.Counts()["reopened"] != 1 {
		t.Fatalf("resumed: %v %v %v", err, p.Counts(), p.Outcomes)
	}
	// Its outcome says who reopened it (issue 54 item 6): not this run.
	if o := p.Outcomes[targets[0].Key()]; !strings.Contains(o.Why, "reopened by an earlier run of this proposal") {
		t.Errorf("the outcome of a reopen this run only finished: %+v", o)
	}
	rec, _ := w.store.Get(ctx, targets[0].ChargeID, time.Now())
	if rec.Generation != 2 || rec.Reopens != 1 {
		t.Fatalf("reopened twice, or not at all: generation %d, %d reopen(s)", rec.Generation, rec.Reopens)
	}
	if d, _ := w.q.Depth(ctx); d.Waiting != 1 {
		t.Fatalf("%d on the queue, want 1", d.Waiting)
	}
}

// A Reopen proposal written before the record was frozen is not acted on.
func TestAnOldReopenProposalIsNotActedOn(t *testing.T) {
	ctx := t.Context()
	w, book, spec, targets := oneToReopen(t, "off")
	old := targets[0]
	old.RecordToken, old.RecordGeneration, old.RecordState = "", 0, ""
	p, _ := book.Propose(olga, spec, []approval.Target{old})
	p, err := book.Run(ctx, p.ID, olga, w.be, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := p.Outcomes[old.Key()]; o.Result != "skipped" || !strings.Contains(o.Why, "propose it again") {
		t.Fatalf("an old proposal's target: %+v", o)
	}
	if rec, _ := w.store.Get(ctx, old.ChargeID, time.Now()); rec.State != driver.StateFailed {
		t.Fatalf("reopened blindly: %+v", rec)
	}
}

// A reopen of a charge without a FAILED record is not proposed.
func TestAReopenOfNoFailedRecordIsNotProposed(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, 1)
	// A declined charge's entry whose record is gone (purged, past its
	// retention).
	body, err := charge.MarshalEvent(charge.Charge{ID: "CHG-NOREC", AccountID: "001234567890", Amount: charge.Money{Minor: 100, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.q.Send(ctx, body, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := w.q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatal(err)
	}
	if err := w.q.DeadLetter(ctx, msgs[0], queue.Reason{Code: chargehandler.Code(charge.DebitFailed)}); err != nil {
		t.Fatal(err)
	}
	_, err = w.be.Select(ctx, approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-50"}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "CHG-NOREC (no record)") {
		t.Fatalf("select: %v", err)
	}
}
