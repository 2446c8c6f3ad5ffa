package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
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
	env, b, ctx := rs.env, rs.b, t.Context()
	crashed, lost := rs.charge("CHG-FE-2"), rs.charge("CHG-FE-3")
	rs.claim(t, "", crashed) // the consumer died after the debit
	rs.claim(t, "REF-", lost)
	time.Sleep(1100 * time.Millisecond) // the crashed claim's lease passes
	stmt := rs.writeStatement(t, "camt053.xml", "STMT-1", rs.posting(crashed))

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
