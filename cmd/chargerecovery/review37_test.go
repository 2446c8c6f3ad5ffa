package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// review37Proposal is a trail in a folder of its own holding olga's
// proposal (made via via, through a book with opts), and an embedded
// installation there, set up, that writes to it: its environment and
// the proposal.
func review37Proposal(t *testing.T, opts approval.Options, via string, spec approval.Spec, targets ...approval.Target) (map[string]string, approval.Proposal) {
	t.Helper()
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	book, err := approval.Open(trail, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := book.Propose(approval.Actor{Name: "olga", Role: "operator", Via: via}, spec, targets)
	if err != nil {
		t.Fatalf("propose: %v", err)
	}
	trail.Close()
	return embeddedEnv(t, dir, "x.db", auditFile), p
}

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
	pol, _ := approval.ParsePolicy("all")
	env, p := review37Proposal(t, approval.Options{Policy: &pol}, "console",
		approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-1"},
		approval.Target{ChargeID: "CHG-1", DLQID: "m-1", Minor: 2500, Currency: "INR"})
	if p.State != approval.Pending {
		t.Fatalf("propose: %s", p.State)
	}
	auditFile := env["IC_AUDIT_FILE"]

	// olga, on the CLI, no policy flag, calls herself ivan.
	env["USER"] = "olga"
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
	env, p := review37Proposal(t, approval.Options{}, "cli", approval.Spec{Kind: approval.Redrive, Reason: "INC-8"}, approval.Target{ChargeID: "CHG-1", DLQID: "m-1"})
	auditFile := env["IC_AUDIT_FILE"]
	forged := "oops\n    99 2026-12-03T08:00:00Z ivan       cli     approve              " + p.ID + "                     approved     INC-8 looks fine\x1b[8m"
	// Refused on the command line (as built) ...
	if r := runCmd(t.Context(), env, "approvals", "reject", p.ID, "--operator", "olga", "--reason", forged); r.code != 1 || !strings.Contains(r.stderr, "control characters") {
		t.Fatalf("reject with a newline and an ESC in its reason: %d %s", r.code, r.stderr)
	}
	// ... and a line that holds one anyway (written by another tool, or by
	// hand) is printed as one row, without the escape.
	trail, err := audit.Open(auditFile)
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
	env, p := review37Proposal(t, approval.Options{}, "cli", approval.Spec{Kind: approval.Redrive, Reason: "INC-9"}, approval.Target{ChargeID: "CHG-1", DLQID: "m-1"})
	auditFile := env["IC_AUDIT_FILE"]
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

// ATTACK (issue 51): the four-eyes policy lived beside the audit file, so
// a process not told about the file (IC_AUDIT_FILE unset) did not know a
// policy existed, and reopened with a new attempt at once, with no line in
// the trail.
//
// Expected: the policy is kept in the backend, beside the records: the
// direct reopen --new-attempt is refused whoever asks, with no audit file
// and no policy flag given, and nothing is written to the record.
func TestAttackCLIDirectReopenNewAttemptWithoutPolicyFlag(t *testing.T) {
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	env := embeddedEnv(t, dir, "x.db", filepath.Join(dir, "audit.jsonl"))
	keepFourEyes(t, env, own["console"], tokens, "reopen-new-attempt")
	failedCharge(t, env, "CHG-1")
	for name, e := range map[string]map[string]string{
		"no audit file, no key, a free name": {"IC_BACKEND": "embedded", "IC_DB": env["IC_DB"]},
		"olga's key, no audit file":          {"IC_BACKEND": "embedded", "IC_DB": env["IC_DB"], "IC_OPERATOR_KEY_FILE": own["olga"]},
		"olga's key and the trail":           as(env, own["olga"]),
	} {
		r := runCmd(t.Context(), e, "reopen", "CHG-1", "--new-attempt", "--reason", "just do it", "--operator", "ivan")
		if r.code == 0 || !strings.Contains(r.stderr, "needs another operator's approval") {
			t.Fatalf("%s: a reopen with a new attempt went straight to the store, no proposal asked for: exit %d\nstdout %s\nstderr %s", name, r.code, r.stdout, r.stderr)
		}
	}
	b := openBackend(t, env)
	if rec, err := b.Store.Get(t.Context(), "CHG-1", time.Now()); err != nil || rec.State != driver.StateFailed || rec.Generation != 1 {
		t.Fatalf("CHG-1 after the refusals: %+v %v", rec, err)
	}
}

// ATTACK: the command line named the operator by her console token,
// checked against a console token file the person acting could name;
// olga wrote her own "console token file" naming a token of hers "ivan".
// Now: she makes a key of her own, names it ivan's in a token file of her
// making, and tries to keep settings with it.
//
// Expected: her key is not one the backend's settings keep (refused), and
// settings are changed only with the console's key (refused); the
// proposal stays pending.
func TestAttackCLISelfMadeConsoleTokenFile(t *testing.T) {
	dir := t.TempDir()
	realTokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := embeddedEnv(t, dir, "x.db", auditFile)
	keepFourEyes(t, env, own["console"], realTokens, "all")
	failedCharge(t, env, "CHG-1")
	r := runCmd(t.Context(), as(env, own["olga"]), "approvals", "propose", "reopen", "--new-attempt", "--charge-id", "CHG-1", "--reason", "INC-13")
	id := proposalID(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("propose: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// Her own approval is refused, as it should be.
	if r := runCmd(t.Context(), as(env, own["olga"]), "approvals", "approve", id, "--no-run"); r.code == 0 {
		t.Fatalf("olga approved her own with her key: %s", r.stdout)
	}
	// olga's home: a key of her making, on a token file of her making as
	// ivan's.
	home := filepath.Join(dir, "olga-home")
	os.Mkdir(home, 0o700)
	fakeKey := filepath.Join(home, "ivan.key")
	k := runCmd(t.Context(), nil, "keygen", "--out", fakeKey)
	fakeTokens := filepath.Join(home, "tokens")
	os.WriteFile(fakeTokens, []byte(console.TokenLine("ivan", console.Operator, "olga-made-this-token-xxxxxxxxxxxx", strings.TrimSpace(k.stdout))+"\n"), 0o600)
	e := as(env, fakeKey)
	e["IC_CONSOLE_TOKEN_FILE"] = fakeTokens
	if r := runCmd(t.Context(), e, "approvals", "approve", id, "--no-run"); r.code == 0 || !strings.Contains(r.stderr, "is not one the backend's settings keep") {
		t.Fatalf("olga approved as ivan with a key of her own: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for _, key := range []string{fakeKey, own["olga"]} {
		if r := runCmd(t.Context(), e, "approvals", "policy", "all", "--reason", "x", "--console-key-file", key, "--console-auth", "token"); r.code == 0 || !strings.Contains(r.stderr, "only the console's key changes them") {
			t.Fatalf("settings kept with olga's key: %d %s %s", r.code, r.stdout, r.stderr)
		}
	}
	trail2, _ := audit.Open(auditFile)
	defer trail2.Close()
	pol, _ := approval.ParsePolicy("all")
	book2, _ := approval.Open(trail2, approval.Options{Policy: &pol})
	got, _ := book2.Get(id)
	if got.State != approval.Pending {
		t.Fatalf("the proposal is %s, decider %+v", got.State, got.Decider)
	}
}
