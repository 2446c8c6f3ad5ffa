package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/service/backend"
)

// writeTokens writes a console token file and one owner-only token file
// per person (what each keeps in her home), and returns their paths.
func writeTokens(t *testing.T, dir string, people ...string) (tokenFile string, own map[string]string) {
	t.Helper()
	own = map[string]string{}
	var lines []string
	for _, p := range people {
		name, role, _ := strings.Cut(p, ":")
		tok := fmt.Sprintf("%s-token-%s", name, strings.Repeat("x", 20))
		lines = append(lines, name+" "+role+" "+tok)
		own[name] = filepath.Join(dir, name+".token")
		if err := os.WriteFile(own[name], []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokenFile = filepath.Join(dir, "console-tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile, own
}

func as(env map[string]string, tokenFile string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	out["IC_OPERATOR_TOKEN_FILE"] = tokenFile
	return out
}

// Five charges declined for insufficient funds: a reopen with a new attempt
// of all five is proposed by one operator, refused to her own approval
// (and to her under another's name), approved and run by a second, each
// charge debited once under its next bank key; every step in the one
// audit trail, which verifies, and fails to once a line is edited.
func TestFourEyesOnTheCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator", "vera:viewer")
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(bank.Close)
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "fourEyes.db"), "IC_COREBANK_URL": bank.URL,
		"IC_COREBANK_ENQUIRY": "true", "IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0",
		"IC_AUDIT_FILE": auditFile, "IC_CONSOLE_TOKEN_FILE": tokens}
	ctx := t.Context()
	declines := map[string]string{}
	var ids []string
	for i := range 5 {
		acct := fmt.Sprintf("00123456%04d", i)
		declines[acct] = "INSUFFICIENT_FUNDS"
		ids = append(ids, fmt.Sprintf("CHG-4E-%d", i))
	}
	ledger.SetFaults(corebanksim.Faults{DeclineAccounts: declines})
	if r := runCmd(ctx, env, "setup"); r.code != 0 {
		t.Fatalf("setup: %s", r.stderr)
	}
	for i, id := range ids {
		if r := runCmd(ctx, env, "send", "--charge-id", id, "--account", fmt.Sprintf("00123456%04d", i), "--amount-minor", "2500"); r.code != 0 {
			t.Fatalf("send: %s", r.stderr)
		}
	}
	b, err := backend.Open(ctx, *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	serveUntil(t, env, nil, func() bool {
		d, err := b.Queue.Depth(ctx)
		return err == nil && d.DLQ == 5 && d.Waiting+d.InFlight == 0
	})
	ledger.SetFaults(corebanksim.Faults{}) // salary day

	olga, ivan, vera := as(env, own["olga"]), as(env, own["ivan"]), as(env, own["vera"])
	// No console here: the policy and the console's token file are kept
	// beside the trail by an operator, while the policy is off.
	if r := runCmd(ctx, olga, "approvals", "policy", "reopen-new-attempt,redrive-force,bulk>2", "--reason", "CHG-4411: four-eyes"); r.code != 0 {
		t.Fatalf("approvals policy: %d %s", r.code, r.stderr)
	}
	// Once on, it is not turned off from the command line, nor by a
	// process given another policy, nor with another token file.
	if r := runCmd(ctx, olga, "approvals", "policy", "off", "--reason", "month-end is over"); r.code != 1 || !strings.Contains(r.stderr, "console's configuration") {
		t.Fatalf("policy off from the command line: %d %s", r.code, r.stderr)
	}
	weaker := as(env, own["olga"])
	weaker["IC_APPROVAL_REQUIRED"] = "bulk>100"
	if r := runCmd(ctx, weaker, "redrive", "--reason", "debit_failed"); r.code != 2 || !strings.Contains(r.stderr, "is kept beside") {
		t.Fatalf("a process given a weaker policy: %d %s", r.code, r.stderr)
	}
	// Direct actions the policy wants proposed are refused, nothing done.
	for _, args := range [][]string{
		{"reopen", ids[0], "--new-attempt", "--reason", "funds"},
		{"redrive", "--reason", "debit_failed"},
		{"redrive", "--charge-id", ids[0], "--force"},
	} {
		if r := runCmd(ctx, olga, args...); r.code != 1 || !strings.Contains(r.stderr, "needs another operator's approval") || !strings.Contains(r.stderr, "approvals propose") {
			t.Fatalf("%v under four-eyes: %d %s", args, r.code, r.stderr)
		}
	}
	// A name is not an identity where four-eyes counts.
	if r := runCmd(ctx, env, "approvals", "propose", "reopen", "--new-attempt", "--reason", "x"); r.code != 2 || !strings.Contains(r.stderr, "--operator-token-file") {
		t.Fatalf("propose without a token: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, vera, "approvals", "propose", "reopen", "--new-attempt", "--reason", "x"); r.code != 1 || !strings.Contains(r.stderr, "viewer") {
		t.Fatalf("a viewer proposes: %d %s", r.code, r.stderr)
	}
	r := runCmd(ctx, olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-9: salary day")
	if r.code != 0 || !strings.Contains(r.stdout, "touches:  5 charge(s), INR 125.00 (5)") || !strings.Contains(r.stdout, "state:    pending") {
		t.Fatalf("propose: %d %s %s", r.code, r.stdout, r.stderr)
	}
	id := regexp.MustCompile(`P-[0-9a-f]{10}`).FindString(r.stdout)
	if r := runCmd(ctx, olga, "approvals", "approve", id); r.code != 1 || !strings.Contains(r.stderr, "cannot approve her own") {
		t.Fatalf("the proposer approves: %d %s", r.code, r.stderr)
	}
	olgaAsIvan := as(env, own["olga"])
	olgaAsIvan["IC_OPERATOR"] = "ivan"
	if r := runCmd(ctx, olgaAsIvan, "approvals", "approve", id); r.code != 2 || !strings.Contains(r.stderr, "not whom the token names") {
		t.Fatalf("the proposer approves as another: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, olga, "approvals", "list"); r.code != 0 || !strings.Contains(r.stdout, id+"  pending") {
		t.Fatalf("list: %s %s", r.stdout, r.stderr)
	}
	if d, _ := b.Queue.Depth(ctx); d.DLQ != 5 {
		t.Fatalf("something moved before approval: %+v", d)
	}
	r = runCmd(ctx, ivan, "approvals", "approve", id, "--batch", "2")
	if r.code != 0 || !strings.Contains(r.stdout, "done: 5 charge(s): 5 reopened") || strings.Count(r.stderr, "batch ") != 3 {
		t.Fatalf("approve and run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	serveUntil(t, env, nil, func() bool {
		for _, c := range ids {
			rec, err := b.Store.Get(ctx, c, time.Now())
			if err != nil || rec.State != driver.StateDone {
				return false
			}
		}
		return true
	})
	posted := ledger.PostingsByKey()
	for _, c := range ids {
		if posted[c+"~2"] != 1 || posted[c] != 0 {
			t.Fatalf("postings %v: want each charge once under ~2", posted)
		}
	}
	if len(posted) != 5 {
		t.Fatalf("postings %v", posted)
	}
	// One trail: the CLI's lines, every step of the proposal.
	r = runCmd(ctx, env, "audit", "list", "--proposal", id, "--limit", "100")
	for _, want := range []string{"propose", "approve", "refused", "execute", "batch", "done"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("audit list lacks %s: %s %s", want, r.stdout, r.stderr)
		}
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 0 || !strings.Contains(r.stdout, "chain whole") {
		t.Fatalf("verify: %d %s %s", r.code, r.stdout, r.stderr)
	}
	raw, _ := os.ReadFile(auditFile)
	edited := strings.Replace(string(raw), `"operator":"ivan"`, `"operator":"olga"`, 1)
	if err := os.WriteFile(auditFile, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 1 || !strings.Contains(r.stderr, "does not carry the hash of the line before") {
		t.Fatalf("verify of an edited trail: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

// Without a policy the command line's actions still go to the trail.
func TestCommandLineActionsGoToTheAuditTrail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "trail.db"), "IC_AUDIT_FILE": auditFile, "IC_OPERATOR": "olga"}
	ctx := t.Context()
	if r := runCmd(ctx, env, "setup"); r.code != 0 {
		t.Fatalf("setup: %s", r.stderr)
	}
	if r := runCmd(ctx, env, "redrive", "--reason", "debit_failed"); r.code != 0 {
		t.Fatalf("redrive: %s", r.stderr)
	}
	r := runCmd(ctx, env, "audit", "list", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"operator":"olga"`) || !strings.Contains(r.stdout, `"via":"cli"`) || !strings.Contains(r.stdout, `"action":"redrive"`) {
		t.Fatalf("audit list: %s %s", r.stdout, r.stderr)
	}
	// A trail that cannot be written stops the action before it is taken.
	env["IC_AUDIT_FILE"] = "/dev/full"
	if r := runCmd(ctx, env, "redrive", "--reason", "debit_failed"); r.code != 1 || !strings.Contains(r.stderr, "nothing done: the audit trail cannot be written") {
		t.Fatalf("redrive with a full disk: %d %s", r.code, r.stderr)
	}
}
