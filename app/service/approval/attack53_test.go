package approval_test

import (
	"bytes"
	"strings"
	"testing"

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
