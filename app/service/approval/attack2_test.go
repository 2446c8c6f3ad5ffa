package approval_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/approval"
)

// An expired proposal brought back by editing its file (its expiry moved
// on, its state set back to pending) is not approved nor run: the expiry
// is vouched for by the propose line, and a proposal the trail says
// expired or was rejected stays so whatever its file says.
func TestAnExpiredProposalEditedBackToLifeIsRefused(t *testing.T) {
	t.Run("expiry moved on before anyone saw it expire", func(t *testing.T) {
		b, _, path, clk := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, targets("CHG-A", "CHG-B"))
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(25 * time.Hour)
		editProposal(t, path, p.ID, func(m map[string]any) {
			m["expires"] = clk.Now().Add(time.Hour).Format(time.RFC3339Nano)
		})
		if _, err := b.Approve(p.ID, ivan); !errors.Is(err, approval.ErrTampered) {
			t.Fatalf("an expired proposal whose file was given a later expiry was approved: %v", err)
		}
		ex := &countingExec{}
		if _, err := b.Run(t.Context(), p.ID, ivan, ex, nil); err == nil || ex.calls > 0 {
			t.Fatalf("run: %v, acted %v", err, ex.n)
		}
	})
	t.Run("expired, then state and expiry edited", func(t *testing.T) {
		b, _, path, clk := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-8"}, targets("CHG-A"))
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(25 * time.Hour)
		if got, err := b.Get(p.ID); err != nil || got.State != approval.Expired {
			t.Fatalf("%v %s", err, got.State)
		}
		editProposal(t, path, p.ID, func(m map[string]any) {
			m["state"] = "pending"
			m["expires"] = clk.Now().Add(time.Hour).Format(time.RFC3339Nano)
		})
		if _, err := b.Approve(p.ID, ivan); err == nil {
			t.Fatal("a proposal the trail says expired was approved after its file was edited")
		}
	})
	t.Run("rejected, then state edited", func(t *testing.T) {
		b, _, path, _ := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-9"}, targets("CHG-A"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Reject(p.ID, ivan, "not now"); err != nil {
			t.Fatal(err)
		}
		editProposal(t, path, p.ID, func(m map[string]any) { m["state"] = "pending"; delete(m, "decider") })
		if _, err := b.Approve(p.ID, ivan); err == nil {
			t.Fatal("a proposal the trail says was rejected was approved after its file was edited")
		}
	})
}

// Two approvers at once: exactly one approves; the other is told it is
// approved already.
func TestTwoApproversRacing(t *testing.T) {
	b, _, _, _ := attackBook(t, "all", 50)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-10"}, targets("CHG-A", "CHG-B"))
	if err != nil {
		t.Fatal(err)
	}
	anna := approval.Actor{Name: "anna", Role: "operator", Via: "cli"}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, who := range []approval.Actor{ivan, anna} {
		wg.Go(func() { _, errs[i] = b.Approve(p.ID, who) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, approval.ErrState) {
			t.Fatalf("the loser: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d approvals succeeded (%v)", ok, errs)
	}
}

// A renotify proposal naming a charge with no record says so plainly
// (it said "not CHG-NOPE (absent )").
func TestARenotifyProposalOfNoRecordSaysSo(t *testing.T) {
	w := newWorld(t, 1)
	_, err := w.be.Select(t.Context(), approval.Spec{Kind: approval.Renotify, Reason: "x", ChargeIDs: []string{"CHG-NOPE"}}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "CHG-NOPE (no record)") {
		t.Fatalf("select: %v", err)
	}
}
