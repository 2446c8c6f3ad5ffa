package approval_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
)

// The approver decides on what a proposal shows: its count, sample and
// total by currency (approvals show, approve's line, the console's page).
// The digest its propose line vouches for covers the targets, not the
// totals kept beside them in the file: the proposer could make 3 × INR
// 25.00 read "INR 0.01" and have it approved as it was — the run then
// acting on every target, each at its own amount. What is shown is
// what the targets sum to, whatever the file says.
func TestAttack53MovedTotalsEditedInTheFileAreNotWhatIsShown(t *testing.T) {
	b, _, path, _ := attackBook(t, "all", 50)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, targets("CHG-A", "CHG-B", "CHG-C"))
	if err != nil {
		t.Fatal(err)
	}
	want := approval.FormatTotals(p.Totals)
	editProposal(t, path, p.ID, func(m map[string]any) {
		m["totals"] = []map[string]any{{"currency": "INR", "minor": 1, "count": 3}}
	})
	got, err := b.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var shown bytes.Buffer
	approval.Print(&shown, got, 10)
	if approval.FormatTotals(got.Totals) != want || !strings.Contains(shown.String(), want) {
		t.Fatalf("shown %q (%s), want the targets' %s", approval.FormatTotals(got.Totals), shown.String(), want)
	}
	a, err := b.Approve(p.ID, ivan)
	if err != nil || approval.FormatTotals(a.Totals) != want {
		t.Fatalf("approved %s, %v; want the targets' %s", approval.FormatTotals(a.Totals), err, want)
	}
	if ps, err := b.List(); err != nil || len(ps) != 1 || approval.FormatTotals(ps[0].Totals) != want {
		t.Fatalf("listed %v, %v", ps, err)
	}
}

// Switching a token installation to proxy sign-in retires the command
// line's keys (a retire-tokens line): people are named by the identity
// provider from then on — "olga@bank.example", where the token file said
// "olga". A proposal olga made before the switch, still pending, was
// approved after it by olga herself under her new name: names are
// compared, and the two are not the same. An approval across the switch
// compares names of two sign-ins, so it is refused: the proposal is made
// again under the names of now.
func TestAttack53MovedApprovalAcrossASignInSwitchIsRefused(t *testing.T) {
	for _, switchLine := range []string{"retire-tokens", "sign-in"} {
		t.Run(switchLine, func(t *testing.T) { approvalAcrossASwitch(t, switchLine) })
	}
}

func approvalAcrossASwitch(t *testing.T, switchLine string) {
	w := newWorld(t, 2)
	consoleKey, olgaKey, ivanKey := genKey(t), genKey(t), genKey(t)
	s := olgaAndIvan(consoleKey, olgaKey, ivanKey)
	open, _ := w.signedBooks(t, s)
	olgas := open(olgaKey, "olga")
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-31: salary credited"}
	targets := w.selectTargets(t, spec, time.Now(), -1)
	p, err := olgas.Propose(olga, spec, targets)
	if err != nil || p.State != approval.Pending {
		t.Fatalf("propose: %v %v", p.State, err)
	}
	// The console's start under proxy sign-in.
	consoles := open(consoleKey, audit.ConsoleSigner)
	ct, err := audit.Open(w.path)
	if err != nil {
		t.Fatal(err)
	}
	ct.Sign, ct.RequireSign = &audit.Signer{Name: audit.ConsoleSigner, Key: consoleKey}, true
	if _, err := ct.Append(audit.Entry{Operator: "system", Via: "console start", Action: switchLine, Result: "retired",
		Detail: "sign-in is by the proxy now"}); err != nil {
		t.Fatal(err)
	}
	ct.Close()
	olgaNow := approval.Actor{Name: "olga@bank.example", Role: "operator", Via: "console"}
	if a, err := consoles.Approve(p.ID, olgaNow); err == nil {
		_, rerr := consoles.Run(t.Context(), p.ID, olgaNow, w.be, nil)
		rec, _ := w.store.Get(t.Context(), targets[0].ChargeID, time.Now())
		t.Fatalf("olga's token-era proposal approved by her proxy name: %s; run: %v; %s generation %d", a.State, rerr, rec.State, rec.Generation)
	}
}
