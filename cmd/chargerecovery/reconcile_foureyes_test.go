package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Under --approval-required reconcile-adopt: resolving a
// posted_not_recorded break (an adoption: money recorded as collected
// without a debit) is refused directly (exit 1, audited, naming the
// approvals propose command; the record stays IN_PROGRESS); marking a
// recorded_not_posted break still works directly; the adoption proposed
// by olga and approved by ivan adopts the posting.
func TestFourEyesReconcileAdopt(t *testing.T) {
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	auditFile := filepath.Join(dir, "audit.jsonl")
	rs := newReconcileSetup(t, dir, map[string]string{"IC_CONSOLE_TOKEN_FILE": tokens}, idempotency.Options{})
	env, b, fp, g, ctx := rs.env, rs.b, rs.fp, rs.g, t.Context()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	mk := func(id string) charge.Charge {
		return charge.Charge{ID: id, AccountID: "001234567890" + id[len(id)-1:], Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: today}
	}
	crashed, lost := mk("CHG-FE-2"), mk("CHG-FE-3")
	for _, c := range []charge.Charge{crashed, lost} {
		cl, err := g.Claim(ctx, c.ID, c.Fingerprint(fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if c.ID == lost.ID {
			if err := g.Complete(ctx, cl.Lease(), string(charge.Debited), "REF-"+c.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(1100 * time.Millisecond) // the crashed claim's lease passes
	req := crashed.DebitRequest()
	stmt := filepath.Join(dir, "camt053.xml")
	f, err := os.Create(stmt)
	if err != nil {
		t.Fatal(err)
	}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Created: time.Now(),
		Period: statement.Period{From: today, To: today.AddDate(0, 0, 1)}},
		[]statement.Posting{{BankKey: req.IdempotencyKey, Account: crashed.AccountID, Amount: crashed.Amount, BookingDate: today,
			Reference: "BANK-" + crashed.ID, Narrative: req.Narrative}}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	olga, ivan := as(env, own["olga"]), as(env, own["ivan"])
	keepFourEyes(t, env, own["console"], tokens, "reconcile-adopt")

	// The adoption, directly: refused, nothing done.
	r := runCmd(ctx, olga, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "INC-7: checked with the bank", crashed.ID)
	if r.code != 1 || !strings.Contains(r.stderr, "needs another operator's approval") ||
		!strings.Contains(r.stderr, "chargerecovery approvals propose reconcile --charge-id "+crashed.ID+" --statement "+stmt+" --collection-account FEES-001") {
		t.Fatalf("direct adoption under reconcile-adopt: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if rec, err := b.Store.Get(ctx, crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the refused adoption wrote the record: %+v %v", rec, err)
	}
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	refused, _ := trail.All(audit.Filter{Action: "reconcile-resolve"})
	trail.Close()
	if len(refused) != 1 || refused[0].Result != "refused" || refused[0].Operator != "olga" {
		t.Fatalf("the refusal's audit line: %+v", refused)
	}

	// Marking a break resolved needs no one else.
	r = runCmd(ctx, olga, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "INC-8: posted on the 2nd", lost.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "marked resolved") {
		t.Fatalf("marking under reconcile-adopt: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Proposed by olga, approved and run by ivan.
	r = runCmd(ctx, olga, "approvals", "propose", "reconcile", "--charge-id", crashed.ID, "--statement", stmt, "--collection-account", "FEES-001",
		"--reason", "INC-7: checked with the bank", "--json")
	var p approval.Proposal
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &p) != nil || p.State != approval.Pending || len(p.Targets) != 1 || p.Targets[0].BreakID == "" {
		t.Fatalf("propose reconcile: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd(ctx, olga, "approvals", "approve", p.ID); r.code == 0 {
		t.Fatalf("olga approved her own adoption: %s", r.stdout)
	}
	r = runCmd(ctx, ivan, "approvals", "approve", p.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "1 adopted") {
		t.Fatalf("approve: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rec, err := b.Store.Get(ctx, crashed.ID, time.Now())
	if err != nil || rec.State != driver.StateDone || charge.ReferenceOf(rec.Status, rec.Detail) != "BANK-"+crashed.ID {
		t.Fatalf("adopted record: %+v %v", rec, err)
	}
}
