package main

import (
	"path/filepath"
	"testing"

	"github.com/finedge/idempotent-consumer/internal/audit"
	"github.com/finedge/idempotent-consumer/service/approval"
)

// ATTACK: the proposer approves her own four-eyes proposal on the command
// line by leaving out --approval-required (or IC_APPROVAL_REQUIRED) and
// giving any --operator name. The proposal was made under a policy and
// records that it needs another operator (Needs != ""), but the approving
// process's own flags decide whether the approver is named by her token.
//
// Expected: approving a proposal whose Needs is set names the approver by
// her console token whatever this process's --approval-required says; a
// bare --operator name is refused (exit 2) and the proposal stays pending.
func TestAttackCLIApproveWithoutPolicyFlagByFreeName(t *testing.T) {
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := approval.ParsePolicy("all")
	book, err := approval.Open(trail, approval.Options{Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	p, err := book.Propose(approval.Actor{Name: "olga", Role: "operator", Via: "console"},
		approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-1"},
		[]approval.Target{{ChargeID: "CHG-1", DLQID: "m-1", Minor: 2500, Currency: "INR"}})
	if err != nil || p.State != approval.Pending {
		t.Fatalf("propose: %v %s", err, p.State)
	}
	trail.Close()

	// olga, on the CLI, no policy flag, calls herself ivan.
	env := map[string]string{"IC_AUDIT_FILE": auditFile, "USER": "olga"}
	r := runCmd(t.Context(), env, "approvals", "approve", p.ID, "--no-run", "--operator", "ivan")
	trail2, _ := audit.Open(auditFile)
	defer trail2.Close()
	book2, _ := approval.Open(trail2, approval.Options{})
	got, _ := book2.Get(p.ID)
	if r.code == 0 || got.State != approval.Pending {
		t.Fatalf("four-eyes bypassed: approve by a bare --operator name without --approval-required: exit %d, state %s, decider %+v\nstdout: %s", r.code, got.State, got.Decider, r.stdout)
	}
}
