package approval_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

const (
	closedAccount = "009900000001" // declined ACCOUNT_CLOSED: a hard decline
	poorAccount   = "009900000002" // declined INSUFFICIENT_FUNDS
	closedCharge  = "CHG-CLOSED"
	poorCharge    = "CHG-POOR"
)

// declinedWorld is two charges delivered through the real charge.Service
// and dead-lettered: one declined ACCOUNT_CLOSED (spelled as a bank might),
// one INSUFFICIENT_FUNDS; then the bank would debit both (salary day, and
// a bank that would take a debit of a closed account all the same).
func declinedWorld(t *testing.T) *chargeWorld {
	t.Helper()
	w := newChargeWorld(t)
	w.ledger.SetFaults(corebanksim.Faults{DeclineAccounts: map[string]string{closedAccount: "Account-Closed", poorAccount: "INSUFFICIENT_FUNDS"}})
	for id, acct := range map[string]string{closedCharge: closedAccount, poorCharge: poorAccount} {
		body, err := charge.MarshalEvent(charge.Charge{ID: id, AccountID: acct, Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.q.Send(t.Context(), body, nil); err != nil {
			t.Fatal(err)
		}
	}
	w.deliver(t)
	for _, id := range []string{closedCharge, poorCharge} {
		if rec, err := w.store.Get(t.Context(), id, time.Now()); err != nil || rec.State != driver.StateFailed {
			t.Fatalf("%s: %+v %v", id, rec, err)
		}
	}
	w.ledger.SetFaults(corebanksim.Faults{})
	return w
}

func bookOf(t *testing.T, policy string) *approval.Book {
	t.Helper()
	trail, err := audit.Open(t.TempDir() + "/audit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trail.Close() })
	p, err := approval.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	b, err := approval.Open(trail, approval.Options{Policy: &p})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func targetOf(ts []approval.Target, id string) (approval.Target, bool) {
	for _, t := range ts {
		if t.ChargeID == id {
			return t, true
		}
	}
	return approval.Target{}, false
}

// A bulk reopen with a new attempt of the DLQ's debit_failed entries,
// one of them declined ACCOUNT_CLOSED. Without represent-hard-decline the
// closed account is held back at the proposal (with its code, never a
// target) and gets no debit request after the approval's run; with it,
// the charge is a target marked hard-declined with its code, needs
// another operator's approval, and only then is presented again.
func TestAHardDeclineInABulkReopenIsHeldBackUnlessThePolicyRepresentsIt(t *testing.T) {
	for _, tc := range []struct {
		policy           string
		closedTarget     bool
		closedDebitsAt2  int
		wantNeeds, print []string
	}{
		{policy: "reopen-new-attempt", closedTarget: false, closedDebitsAt2: 0,
			wantNeeds: []string{"a reopen with a new attempt"},
			print:     []string{"touches:  1 charge(s), INR 25.00 (1)", "held back: 1 charge(s)", closedCharge, "********0001", "Account-Closed HARD DECLINE (the account is closed)", "never presented again"}},
		{policy: "represent-hard-decline", closedTarget: true, closedDebitsAt2: 1,
			wantNeeds: []string{"hard-declined charge(s) (" + closedCharge + " Account-Closed)"},
			print:     []string{"touches:  2 charge(s), INR 50.00 (2)", "********0001", "Account-Closed HARD DECLINE (the account is closed)", "INSUFFICIENT_FUNDS", "state:    pending"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			ctx := t.Context()
			w := declinedWorld(t)
			book := bookOf(t, tc.policy)
			be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
			spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-51: salary credited"}
			targets := selectTargets(t, be, spec, time.Now(), 2)
			p, err := book.Propose(olga, spec, targets)
			if err != nil {
				t.Fatal(err)
			}
			ct, isTarget := targetOf(p.Targets, closedCharge)
			if isTarget != tc.closedTarget {
				t.Fatalf("the closed account is a target: %v, want %v (targets %+v, held %+v)", isTarget, tc.closedTarget, p.Targets, p.Held)
			}
			if isTarget && (!ct.HardDecline || ct.DeclineCode != "Account-Closed") {
				t.Fatalf("the hard decline is not marked with its code on the proposal: %+v", ct)
			}
			if !isTarget && (len(p.Held) != 1 || p.Held[0].ChargeID != closedCharge || p.Held[0].DeclineCode != "Account-Closed" || !p.Held[0].HardDecline) {
				t.Fatalf("held back: %+v", p.Held)
			}
			if p.State != approval.Pending {
				t.Fatalf("state %s, want pending (needs %q)", p.State, p.Needs)
			}
			for _, want := range tc.wantNeeds {
				if !strings.Contains(p.Needs, want) {
					t.Fatalf("needs %q, want %q in it", p.Needs, want)
				}
			}
			var out bytes.Buffer
			approval.Print(&out, p, 20)
			for _, want := range tc.print {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("the proposal as printed lacks %q:\n%s", want, out.String())
				}
			}
			if strings.Contains(out.String(), closedAccount) {
				t.Fatalf("an account in clear:\n%s", out.String())
			}
			// The proposer cannot approve it; another operator does.
			if _, err := book.Approve(p.ID, olga); err == nil {
				t.Fatal("the proposer approved her own proposal")
			}
			if _, err := book.Approve(p.ID, ivan); err != nil {
				t.Fatal(err)
			}
			if p, err = book.Run(ctx, p.ID, ivan, be, nil); err != nil {
				t.Fatal(err)
			}
			w.deliver(t)
			if n := w.ledger.Calls(poorCharge + "~2"); n != 1 {
				t.Errorf("%d debit requests under %s~2, want 1", n, poorCharge)
			}
			if n := w.ledger.Calls(closedCharge + "~2"); n != tc.closedDebitsAt2 {
				t.Errorf("%d debit requests of the closed account under %s~2, want %d", n, closedCharge, tc.closedDebitsAt2)
			}
			if n := w.ledger.Calls(closedCharge); n != 1 {
				t.Errorf("%d debit requests under %s, want the first one only", n, closedCharge)
			}
		})
	}
}

// The run checks again: a proposal that froze a hard decline as a plain
// target (one made before proposals held them back, or a target the
// approver was not shown as hard-declined) holds it back at its run, with
// the code, and the closed account gets no debit request — under either
// policy.
func TestARunHoldsBackAHardDeclineTheApproverWasNotShown(t *testing.T) {
	for _, tc := range []struct{ policy, why string }{
		{"reopen-new-attempt", "has no represent-hard-decline"},
		{"reopen-new-attempt,represent-hard-decline", "the approver was not shown"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			ctx := t.Context()
			w := declinedWorld(t)
			book := bookOf(t, tc.policy)
			be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
			spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-51", ChargeIDs: []string{closedCharge}}
			targets := selectTargets(t, be, spec, time.Now(), 1)
			// As main froze it before: the record's token, no decline code.
			targets[0].DeclineCode, targets[0].HardDecline = "", false
			p, err := book.Propose(olga, spec, targets)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := book.Approve(p.ID, ivan); err != nil {
				t.Fatal(err)
			}
			if p, err = book.Run(ctx, p.ID, ivan, be, nil); err != nil {
				t.Fatal(err)
			}
			o := p.Outcomes[targets[0].Key()]
			if o.Result != "held back" || !strings.Contains(o.Why, "Account-Closed") || !strings.Contains(o.Why, tc.why) {
				t.Fatalf("outcome %+v, want held back with the code and %q", o, tc.why)
			}
			w.deliver(t)
			if n := w.ledger.Calls(closedCharge + "~2"); n != 0 {
				t.Fatalf("%d debit requests of the closed account under ~2", n)
			}
			if rec, _ := w.store.Get(ctx, closedCharge, time.Now()); rec.State != driver.StateFailed || rec.Generation > 1 {
				t.Fatalf("the closed account's record was reopened: %+v", rec)
			}
		})
	}
}

// An executor handed a proposal by any other path than Book.Run (which
// says what the kept policy is) refuses a hard decline.
func TestExecuteOutsideARunRefusesAHardDecline(t *testing.T) {
	ctx := t.Context()
	w := declinedWorld(t)
	be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-51", ChargeIDs: []string{closedCharge}}
	targets, err := be.Select(ctx, spec, time.Now())
	if err != nil || len(targets) != 1 || !targets[0].HardDecline {
		t.Fatalf("select: %+v %v", targets, err)
	}
	outs := be.Execute(ctx, approval.Proposal{ID: "P-0000000001", Spec: spec, Targets: targets}, targets, ivan)
	if o := outs[targets[0].Key()]; o.Result != "held back" {
		t.Fatalf("outcome %+v", o)
	}
	if rec, _ := w.store.Get(ctx, closedCharge, time.Now()); rec.Generation > 1 {
		t.Fatalf("reopened: %+v", rec)
	}
}

// --decline-code keeps the charges declined with one of its codes, as a
// bank spells them or not; a charge named by id that it drops is said.
func TestADeclineCodeFilterKeepsOnlyThoseCodes(t *testing.T) {
	ctx := t.Context()
	w := declinedWorld(t)
	be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	for _, tc := range []struct {
		kind  approval.Kind
		codes []string
		want  []string
	}{
		{approval.Reopen, []string{"INSUFFICIENT_FUNDS"}, []string{poorCharge}},
		{approval.Reopen, []string{"insufficient funds"}, []string{poorCharge}},
		{approval.Reopen, []string{"ACCOUNT_CLOSED"}, []string{closedCharge}},
		{approval.Redrive, []string{"insufficient-funds", "NO_MANDATE"}, []string{poorCharge}},
		{approval.Reopen, nil, []string{closedCharge, poorCharge}},
	} {
		spec := approval.Spec{Kind: tc.kind, NewAttempt: tc.kind == approval.Reopen, Reason: "INC-51", DeclineCodes: tc.codes}
		ts, err := be.Select(ctx, spec, time.Now())
		if err != nil {
			t.Fatalf("%s %v: %v", tc.kind, tc.codes, err)
		}
		var got []string
		for _, x := range ts {
			got = append(got, x.ChargeID)
			if x.DeclineCode == "" {
				t.Errorf("%s %v: %s without its decline code", tc.kind, tc.codes, x.ChargeID)
			}
		}
		slices.Sort(got)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s %v: %v, want %v", tc.kind, tc.codes, got, tc.want)
		}
	}
	_, err := be.Select(ctx, approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "x", DeclineCodes: []string{"INSUFFICIENT_FUNDS"},
		ChargeIDs: []string{closedCharge, poorCharge}}, time.Now())
	if err == nil || !strings.Contains(err.Error(), closedCharge+" (Account-Closed)") {
		t.Fatalf("a named charge the filter drops: %v", err)
	}
	for _, bad := range []approval.Spec{
		{Kind: approval.Renotify, Reason: "x", DeclineCodes: []string{"INSUFFICIENT_FUNDS"}},
		{Kind: approval.Reopen, Reason: "x", DeclineCodes: []string{" - "}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestThePolicyTermRepresentHardDecline(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		term    bool
	}{
		{"represent-hard-decline", "represent-hard-decline", true},
		{"reopen-new-attempt, represent-hard-decline ,bulk>3", "reopen-new-attempt,bulk>3,represent-hard-decline", true},
		{"all", "reopen-new-attempt,redrive-force,reconcile-adopt,bulk>1", false},
		{"reopen-new-attempt", "reopen-new-attempt", false},
	} {
		p, err := approval.ParsePolicy(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if p.RepresentHardDecline != tc.term || p.String() != tc.out {
			t.Errorf("%q: term %v, string %q; want %v, %q", tc.in, p.RepresentHardDecline, p.String(), tc.term, tc.out)
		}
		if back, err := approval.ParsePolicy(p.String()); err != nil || back != p {
			t.Errorf("%q: does not read back: %+v %v", p.String(), back, err)
		}
		if !p.On() {
			t.Errorf("%q: not on", tc.in)
		}
	}
	if _, err := approval.ParsePolicy("represent-hard-declines"); err == nil {
		t.Error("a misspelt term is read")
	}
}
