package operate

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

// A charge whose retry schedule ran out (FAILED retries_exhausted, its
// attempts in the history) is a decline to the operator's reopen: refused
// under the same key, reopened into the next generation with its history
// kept and the reopening added.
func TestReopenOfAChargeWhoseRetriesRanOut(t *testing.T) {
	ctx := t.Context()
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	c := charge.Charge{ID: "CHG-EXH", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	svc, err := charge.NewService(charge.Options{Guard: g, Debiter: declining{}, Notifier: nopNotifier{},
		Retry: &charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: 24 * time.Hour, Retries: 1}}, Jitter: charge.NoJitter}})
	if err != nil {
		t.Fatal(err)
	}
	if res := svc.Process(ctx, c, nil); res.Outcome != charge.Waiting {
		t.Fatalf("first decline: %+v", res)
	}
	clock.Advance(24*time.Hour + idempotency.DefaultSkewMargin)
	if res := svc.Process(ctx, c, nil); res.Outcome != charge.DebitFailed || !strings.HasPrefix(res.Reason, "retries_exhausted: debit declined: INSUFFICIENT_FUNDS") {
		t.Fatalf("second decline: %+v", res)
	}

	if rec, err := Reopen(ctx, g, c.ID, "salary credited", false, "asha"); !errors.Is(err, ErrDeclinedSameKey) || len(rec.History) != 2 {
		t.Fatalf("plain reopen: %+v, %v; want ErrDeclinedSameKey", rec, err)
	}
	rec, err := Reopen(ctx, g, c.ID, "salary credited", true, "asha")
	if err != nil || rec.Generation != 3 || len(rec.History) != 3 || !strings.Contains(rec.History[2], "reopened") ||
		!strings.HasPrefix(rec.History[2], "generation 2: FAILED retries_exhausted: debit declined: INSUFFICIENT_FUNDS") {
		t.Fatalf("reopen --new-attempt: %+v, %v", rec, err)
	}
}

type declining struct{}

func (declining) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	return charge.DebitReceipt{}, &charge.DeclineError{Code: "INSUFFICIENT_FUNDS"}
}

type nopNotifier struct{}

func (nopNotifier) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	return nil
}

// Attack 54: an operator's reopen reason is free text; one that names the
// customer's account (typed on the command line) must not be kept in
// clear in the record (its reason and history, which the console and
// `show` display) nor in the command's audit log line.
func TestAttack54ConsoleAReopenReasonIsKeptMasked(t *testing.T) {
	const account = "001234567890"
	store := memstore.New()
	g, err := idempotency.NewGuard(store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), "CHG-RSN-1", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "core banking unavailable"); err != nil {
		t.Fatal(err)
	}
	var out, audit bytes.Buffer
	if err := ReopenCharge(t.Context(), store, ReopenOptions{ID: "CHG-RSN-1", Reason: "INC-7: customer paid into " + account, Operator: "olga", Out: &out, Audit: &audit}); err != nil {
		t.Fatal(err)
	}
	rec, err := g.Get(t.Context(), "CHG-RSN-1")
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"the record's reason": rec.ReopenReason, "its history": strings.Join(rec.History, "\n"), "the audit line": audit.String(), "the output": out.String()} {
		if strings.Contains(s, account) {
			t.Fatalf("%s keeps the account in clear: %s", what, s)
		}
	}
	if !strings.Contains(rec.ReopenReason, "INC-7: customer paid into") {
		t.Fatalf("the reason is lost: %q", rec.ReopenReason)
	}
}
