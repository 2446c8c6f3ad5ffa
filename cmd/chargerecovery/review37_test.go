package main

import (
	"os"
	"path/filepath"
	"strings"
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

// ATTACK: a reason given on the command line is kept as typed, control
// characters and all, and `audit list` (and approvals list/show) print it
// raw: a reason carrying "\n" and a made-up row forges an audit row on the
// reader's terminal (an ESC sequence could hide text as well).
//
// Expected: reasons are stored printable (control characters dropped, as
// the console does with charge.Printable), or printed escaped: audit list
// prints one row per entry, and no row the trail does not hold.
func TestAttackReasonNewlineForgesAuditListRow(t *testing.T) {
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	book, _ := approval.Open(trail, approval.Options{})
	p, err := book.Propose(approval.Actor{Name: "olga", Role: "operator", Via: "cli"},
		approval.Spec{Kind: approval.Redrive, Reason: "INC-8"}, []approval.Target{{ChargeID: "CHG-1", DLQID: "m-1"}})
	if err != nil {
		t.Fatal(err)
	}
	trail.Close()
	forged := "oops\n    99 2026-12-03T08:00:00Z ivan       cli     approve              " + p.ID + "                     approved     INC-8 looks fine\x1b[8m"
	env := map[string]string{"IC_AUDIT_FILE": auditFile}
	// Refused on the command line (as built) ...
	if r := runCmd(t.Context(), env, "approvals", "reject", p.ID, "--operator", "olga", "--reason", forged); r.code != 1 || !strings.Contains(r.stderr, "control characters") {
		t.Fatalf("reject with a newline and an ESC in its reason: %d %s", r.code, r.stderr)
	}
	// ... and a line that holds one anyway (written by another tool, or by
	// hand) is printed as one row, without the escape.
	trail, err = audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trail.Append(audit.Entry{Operator: "olga", Action: "reject", Proposal: p.ID, Reason: forged, Result: "rejected"}); err != nil {
		t.Fatal(err)
	}
	trail.Close()
	r := runCmd(t.Context(), env, "audit", "list")
	rows := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if r.code != 0 || len(rows) != 2 || strings.Contains(r.stdout, "\x1b") {
		t.Fatalf("audit list of a 2-line trail printed %d rows (or an ESC):\n%s", len(rows), r.stdout)
	}
}

// ATTACK: the last lines of the trail can be cut with nothing to show it.
// audit verify says to compare its head "with the last audit head the
// processes logged", but the command line's trail logs no head at all
// (Trail.Head is nil outside the console, and the console logs it at
// Debug only): cut the CLI's last line and verify still says whole.
//
// Expected: every process that appends logs the new head (seq and sha256)
// where it is kept apart from the file (stderr/the log at Info at least),
// so the line cut from the end shows; here the reject's head must appear
// in what the command printed.
func TestAttackCLIAppendsAnchorNoHead(t *testing.T) {
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	book, _ := approval.Open(trail, approval.Options{})
	p, err := book.Propose(approval.Actor{Name: "olga", Role: "operator", Via: "cli"},
		approval.Spec{Kind: approval.Redrive, Reason: "INC-9"}, []approval.Target{{ChargeID: "CHG-1", DLQID: "m-1"}})
	if err != nil {
		t.Fatal(err)
	}
	trail.Close()
	env := map[string]string{"IC_AUDIT_FILE": auditFile}
	r := runCmd(t.Context(), env, "approvals", "reject", p.ID, "--operator", "ivan", "--reason", "not today")
	if r.code != 0 {
		t.Fatalf("reject: %d %s", r.code, r.stderr)
	}
	raw, _ := os.ReadFile(auditFile)
	lines := strings.SplitAfter(strings.TrimRight(string(raw), "\n"), "\n")
	last := strings.TrimRight(lines[len(lines)-1], "\n")
	head := audit.Hash([]byte(last))
	// The reject's line is cut from the end.
	if err := os.WriteFile(auditFile, []byte(strings.Join(lines[:len(lines)-1], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	v := runCmd(t.Context(), env, "audit", "verify")
	if v.code == 0 && !strings.Contains(r.stdout+r.stderr, head) {
		t.Fatalf("the reject's line was cut, verify says %q, and the reject logged no head (%s) anywhere to compare with:\nstdout %q\nstderr %q", strings.TrimSpace(v.stdout), head[:12], r.stdout, r.stderr)
	}
}

// ATTACK (same root as TestAttackCLIApproveWithoutPolicyFlagByFreeName):
// the four-eyes policy is only a flag of the process that acts. The
// console runs under --approval-required reopen-new-attempt, and a
// proposal made under it is on file beside the trail; an operator on the
// command line leaves the flag out and reopens with a new attempt
// directly, under any --operator name: no proposal, no second operator.
//
// Expected: the policy in force for a trail is kept with it (e.g. in the
// proposals directory) and every process writing that trail applies it:
// the direct reopen --new-attempt is refused with "needs another
// operator's approval".
func TestAttackCLIDirectReopenNewAttemptWithoutPolicyFlag(t *testing.T) {
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := approval.ParsePolicy("reopen-new-attempt")
	if _, err := approval.Open(trail, approval.Options{Policy: &pol}); err != nil { // the console's book
		t.Fatal(err)
	}
	trail.Close()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "x.db"), "IC_AUDIT_FILE": auditFile}
	if r := runCmd(t.Context(), env, "setup"); r.code != 0 {
		t.Fatalf("setup: %s", r.stderr)
	}
	r := runCmd(t.Context(), env, "reopen", "CHG-1", "--new-attempt", "--reason", "just do it", "--operator", "ivan")
	if !strings.Contains(r.stderr, "needs another operator's approval") {
		t.Fatalf("a reopen with a new attempt went straight to the store, no proposal asked for: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// ATTACK: under --approval-required the command line names the operator
// by her console token, checked against --console-token-file; but that
// file is whatever the person acting gives. Olga writes her own "console
// token file" naming a token of hers "ivan", and approves her own
// proposal as ivan, under the policy, with all the flags it asks for.
//
// Expected: the token is checked against the console's own token file (a
// path fixed by the deployment and owned by the console's user, not a
// flag of the caller), or the approver proves herself otherwise; here the
// approval is refused and the proposal stays pending.
func TestAttackCLISelfMadeConsoleTokenFile(t *testing.T) {
	dir := t.TempDir()
	realTokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_AUDIT_FILE": auditFile, "IC_APPROVAL_REQUIRED": "all", "IC_CONSOLE_TOKEN_FILE": realTokens}
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := approval.ParsePolicy("all")
	book, _ := approval.Open(trail, approval.Options{Policy: &pol})
	p, err := book.Propose(approval.Actor{Name: "olga", Role: "operator", Via: "cli"},
		approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-13"}, []approval.Target{{ChargeID: "CHG-1", DLQID: "m-1"}})
	if err != nil {
		t.Fatal(err)
	}
	trail.Close()
	// Her own approval is refused, as it should be.
	if r := runCmd(t.Context(), as(env, own["olga"]), "approvals", "approve", p.ID, "--no-run"); r.code == 0 {
		t.Fatalf("olga approved her own with her token: %s", r.stdout)
	}
	// olga's home: a token file and a console token file of her making.
	home := filepath.Join(dir, "olga-home")
	os.Mkdir(home, 0o700)
	fakeTokens := filepath.Join(home, "tokens")
	os.WriteFile(fakeTokens, []byte("ivan operator olga-made-this-token-xxxxxxxxxxxx\n"), 0o600)
	fakeOwn := filepath.Join(home, "ivan.token")
	os.WriteFile(fakeOwn, []byte("olga-made-this-token-xxxxxxxxxxxx\n"), 0o600)
	e := as(env, fakeOwn)
	e["IC_CONSOLE_TOKEN_FILE"] = fakeTokens
	r := runCmd(t.Context(), e, "approvals", "approve", p.ID, "--no-run")
	trail2, _ := audit.Open(auditFile)
	defer trail2.Close()
	book2, _ := approval.Open(trail2, approval.Options{Policy: &pol})
	got, _ := book2.Get(p.ID)
	if r.code == 0 || got.State != approval.Pending {
		t.Fatalf("olga approved her own proposal as ivan with a console token file she wrote: exit %d, state %s, decider %+v\n%s%s", r.code, got.State, got.Decider, r.stdout, r.stderr)
	}
}
