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

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// declinedCharge is a charge sent to an account the bank declines, and
// its code.
type declinedCharge struct{ id, account, code string }

// declinedOnTheDLQ is an embedded installation (its database db, its trail
// audit.jsonl beside it, tokens its console token file) that sent each
// charge, each declined for its code by the simulated bank and now on the
// DLQ, the consumer stopped; the bank then debits again (no faults).
func declinedOnTheDLQ(t *testing.T, db, tokens string, charges ...declinedCharge) (map[string]string, *backend.Backend, *corebanksim.Ledger) {
	t.Helper()
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(bank.Close)
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": db, "IC_COREBANK_URL": bank.URL,
		"IC_COREBANK_ENQUIRY": "true", "IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0",
		"IC_AUDIT_FILE": filepath.Join(filepath.Dir(db), "audit.jsonl"), "IC_CONSOLE_TOKEN_FILE": tokens}
	ctx := t.Context()
	declines := map[string]string{}
	for _, c := range charges {
		declines[c.account] = c.code
	}
	ledger.SetFaults(corebanksim.Faults{DeclineAccounts: declines})
	mustSetup(t, env)
	for _, c := range charges {
		if r := runCmd(ctx, env, "send", "--charge-id", c.id, "--account", c.account, "--amount-minor", "2500"); r.code != 0 {
			t.Fatalf("send: %s", r.stderr)
		}
	}
	b := openBackend(t, env)
	serveUntil(t, env, nil, func() bool {
		d, err := b.Queue.Depth(ctx)
		return err == nil && d.DLQ == len(charges) && d.Waiting+d.InFlight == 0
	})
	ledger.SetFaults(corebanksim.Faults{})
	return env, b, ledger
}

// proposalID is the first proposal id (P- and ten hex digits) in s, or "".
func proposalID(s string) string {
	return proposalIDPattern.FindString(s)
}

var proposalIDPattern = regexp.MustCompile(`P-[0-9a-f]{10}`)

// writeTokens writes a console token file (hashes, and each person's
// command-line public key) and one owner-only key file per person (what
// each keeps in her home), and returns their paths; own["console"] is the
// console's key.
func writeTokens(t *testing.T, dir string, people ...string) (tokenFile string, own map[string]string) {
	t.Helper()
	own = map[string]string{}
	var lines []string
	for _, p := range append([]string{"console:"}, people...) {
		name, role, _ := strings.Cut(p, ":")
		own[name] = filepath.Join(dir, name+".key")
		r := runCmd(t.Context(), nil, "keygen", "--out", own[name])
		if r.code != 0 {
			t.Fatalf("keygen: %s", r.stderr)
		}
		if name == "console" {
			continue
		}
		ro, err := console.ParseRole(role)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, console.TokenLine(name, ro, fmt.Sprintf("%s-token-%s", name, strings.Repeat("x", 20)), strings.TrimSpace(r.stdout)))
	}
	tokenFile = filepath.Join(dir, "console-tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile, own
}

func as(env map[string]string, keyFile string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	out["IC_OPERATOR_KEY_FILE"] = keyFile
	return out
}

// keepFourEyes keeps policy in env's backend, as a console's start would,
// with the console's key (no console runs in these tests).
func keepFourEyes(t *testing.T, env map[string]string, consoleKey, tokens, policy string) {
	t.Helper()
	r := runCmd(t.Context(), env, "approvals", "policy", policy, "--reason", "CHG-4411: four-eyes", "--console-key-file", consoleKey,
		"--console-auth", "token", "--console-token-file", tokens)
	if r.code != 0 {
		t.Fatalf("approvals policy: %d %s", r.code, r.stderr)
	}
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
	auditFile := filepath.Join(dir, "audit.jsonl")
	var ids []string
	var declined []declinedCharge
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("CHG-4E-%d", i))
		declined = append(declined, declinedCharge{ids[i], fmt.Sprintf("00123456%04d", i), "INSUFFICIENT_FUNDS"})
	}
	env, b, ledger := declinedOnTheDLQ(t, filepath.Join(dir, "fourEyes.db"), tokens, declined...) // salary day: the bank debits again
	ctx := t.Context()

	olga, ivan, vera := as(env, own["olga"]), as(env, own["ivan"]), as(env, own["vera"])
	// No console here: the policy is kept in the backend with the
	// console's key.
	keepFourEyes(t, env, own["console"], tokens, "reopen-new-attempt,redrive-force,bulk>2")
	// Once on, it is not turned off from the command line without the
	// console's key (an operator's key is not it), nor by a process given
	// another policy.
	if r := runCmd(ctx, olga, "approvals", "policy", "off", "--reason", "month-end is over", "--console-key-file", own["olga"],
		"--console-auth", "token", "--console-token-file", tokens); r.code != 2 || !strings.Contains(r.stderr, "only the console's key changes them") {
		t.Fatalf("policy off from the command line: %d %s", r.code, r.stderr)
	}
	weaker := as(env, own["olga"])
	weaker["IC_APPROVAL_REQUIRED"] = "bulk>100"
	if r := runCmd(ctx, weaker, "redrive", "--reason", "debit_failed"); r.code != 2 || !strings.Contains(r.stderr, "the backend keeps") {
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
	if r := runCmd(ctx, env, "approvals", "propose", "reopen", "--new-attempt", "--reason", "x"); r.code != 2 || !strings.Contains(r.stderr, "--operator-key-file") {
		t.Fatalf("propose without a key: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, vera, "approvals", "propose", "reopen", "--new-attempt", "--reason", "x"); r.code != 1 || !strings.Contains(r.stderr, "viewer") {
		t.Fatalf("a viewer proposes: %d %s", r.code, r.stderr)
	}
	r := runCmd(ctx, olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-9: salary day")
	if r.code != 0 || !strings.Contains(r.stdout, "touches:  5 charge(s), INR 125.00 (5)") || !strings.Contains(r.stdout, "state:    pending") {
		t.Fatalf("propose: %d %s %s", r.code, r.stdout, r.stderr)
	}
	id := proposalID(r.stdout)
	if r := runCmd(ctx, olga, "approvals", "approve", id); r.code != 1 || !strings.Contains(r.stderr, "cannot approve her own") {
		t.Fatalf("the proposer approves: %d %s", r.code, r.stderr)
	}
	olgaAsIvan := as(env, own["olga"])
	olgaAsIvan["IC_OPERATOR"] = "ivan"
	if r := runCmd(ctx, olgaAsIvan, "approvals", "approve", id); r.code != 2 || !strings.Contains(r.stderr, "not whom the key names") {
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
	serveUntil(t, env, nil, allDone(t, b, ids))
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
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 0 || !strings.Contains(r.stdout, "chain whole") || !strings.Contains(r.stdout, "each vouched for by its writer's key") {
		t.Fatalf("verify: %d %s %s", r.code, r.stdout, r.stderr)
	}
	raw, _ := os.ReadFile(auditFile)
	edited := strings.Replace(string(raw), `"operator":"ivan"`, `"operator":"olga"`, 1)
	if err := os.WriteFile(auditFile, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 1 || !strings.Contains(r.stderr, "no writer vouched for the line") {
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
	mustSetup(t, env)
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

func openBackend(t *testing.T, env map[string]string) *backend.Backend {
	t.Helper()
	b, err := backend.Open(t.Context(), *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// failedCharge makes id a charge the bank declined for insufficient
// funds: its FAILED record and its message on the DLQ.
func failedCharge(t *testing.T, env map[string]string, id string) {
	t.Helper()
	ctx := t.Context()
	b := openBackend(t, env)
	c := charge.Charge{ID: id, AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	body, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(ctx, id, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(ctx, cl.Lease(), "FAILED", "debit declined: INSUFFICIENT_FUNDS"); err != nil {
		t.Fatal(err)
	}
	deadLetter(t, b.Queue, body, queue.Reason{Code: chargehandler.Code(charge.DebitFailed), Detail: "declined: INSUFFICIENT_FUNDS"})
}

// deadLetter sends body to q, receives it and moves it to the DLQ for
// why.
func deadLetter(t *testing.T, q queue.Queue, body []byte, why queue.Reason) {
	t.Helper()
	ctx := t.Context()
	if _, err := q.Send(ctx, body, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %d", err, len(msgs))
	}
	if err := q.DeadLetter(ctx, msgs[0], why); err != nil {
		t.Fatal(err)
	}
}

// Issue 51: a bulk reopen with a new attempt of every debit_failed charge,
// one of them declined ACCOUNT_CLOSED. The closed account is held back at
// the proposal, with its code, masked account and amount (in the
// proposal's output and approvals show), is refused a direct new attempt,
// and after another operator's approval and the run gets no debit request
// while the others are debited under ~2. --decline-code chooses by the
// bank's code. Under a policy with represent-hard-decline the same charge
// is a target marked with its code, waiting for another operator, and a
// direct new attempt is refused with the command that proposes it.
func TestAHardDeclineInABulkReopenOnTheCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	const closed, closedAcct = "CHG-HD-CLOSED", "001122337802"
	poor := []string{"CHG-HD-POOR-1", "CHG-HD-POOR-2"}
	// Salary day afterwards: the bank would take the closed account's debit all the same.
	env, b, ledger := declinedOnTheDLQ(t, filepath.Join(dir, "hard.db"), tokens,
		declinedCharge{closed, closedAcct, "ACCOUNT_CLOSED"},
		declinedCharge{poor[0], "001122330001", "INSUFFICIENT_FUNDS"}, declinedCharge{poor[1], "001122330002", "INSUFFICIENT_FUNDS"})
	ctx := t.Context()

	// Policy off: a direct new attempt on the hard decline is refused,
	// saying its code.
	named := map[string]string{}
	for k, v := range env {
		named[k] = v
	}
	named["IC_OPERATOR"] = "olga"
	if r := runCmd(ctx, named, "reopen", closed, "--new-attempt", "--reason", "salary day"); r.code != 1 || !strings.Contains(r.stderr, "declined ACCOUNT_CLOSED") || !strings.Contains(r.stderr, "hard decline") {
		t.Fatalf("a direct new attempt on a hard decline: %d %s", r.code, r.stderr)
	}

	olga, ivan := as(env, own["olga"]), as(env, own["ivan"])
	keepFourEyes(t, env, own["console"], tokens, "reopen-new-attempt")
	// --decline-code, spelled as a person types it.
	r := runCmd(ctx, olga, "approvals", "propose", "reopen", "--new-attempt", "--decline-code", "insufficient funds", "--reason", "INC-51: salary day")
	if r.code != 0 || !strings.Contains(r.stdout, "touches:  2 charge(s), INR 50.00 (2)") || strings.Contains(r.stdout, closed) || strings.Count(r.stdout, "INSUFFICIENT_FUNDS") < 2 {
		t.Fatalf("propose --decline-code: %d %s %s", r.code, r.stdout, r.stderr)
	}
	filtered := proposalID(r.stdout)
	if r := runCmd(ctx, olga, "approvals", "reject", filtered, "--reason", "one proposal for all of them"); r.code != 0 {
		t.Fatalf("reject: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, olga, "approvals", "propose", "reopen", "--new-attempt", "--decline-code", "ACCOUNT_CLOSED", "--reason", "x"); r.code == 0 || !strings.Contains(r.stderr, closed+" declined ACCOUNT_CLOSED") {
		t.Fatalf("a proposal of hard declines alone: %d %s %s", r.code, r.stdout, r.stderr)
	}

	r = runCmd(ctx, olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-51: salary day")
	if r.code != 0 || !strings.Contains(r.stdout, "touches:  2 charge(s), INR 50.00 (2)") || !strings.Contains(r.stdout, "held back: 1 charge(s)") ||
		!regexp.MustCompile(closed+` +\*{8}7802 +INR 25\.00 +debit_failed +ACCOUNT_CLOSED HARD DECLINE`).MatchString(r.stdout) {
		t.Fatalf("propose: %d %s %s", r.code, r.stdout, r.stderr)
	}
	id := proposalID(r.stdout)
	show := runCmd(ctx, ivan, "approvals", "show", id)
	for _, want := range []string{"held back", closed, "ACCOUNT_CLOSED HARD DECLINE", "********7802", poor[0], "INSUFFICIENT_FUNDS", "INR 25.00"} {
		if show.code != 0 || !strings.Contains(show.stdout, want) {
			t.Fatalf("approvals show lacks %q: %s %s", want, show.stdout, show.stderr)
		}
	}
	js := runCmd(ctx, ivan, "approvals", "show", id, "--json")
	for _, want := range []string{`"declineCode":"INSUFFICIENT_FUNDS"`, `"held":[{"chargeId":"` + closed + `"`, `"declineCode":"ACCOUNT_CLOSED","hardDecline":true`} {
		if js.code != 0 || !strings.Contains(js.stdout, want) {
			t.Fatalf("approvals show --json lacks %s: %s %s", want, js.stdout, js.stderr)
		}
	}
	for _, out := range []string{r.stdout, show.stdout, js.stdout} {
		if strings.Contains(out, closedAcct) {
			t.Fatalf("an account in clear: %s", out)
		}
	}
	if r := runCmd(ctx, ivan, "approvals", "approve", id); r.code != 0 || !strings.Contains(r.stdout, "done: 2 charge(s): 2 reopened") {
		t.Fatalf("approve and run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	serveUntil(t, env, nil, allDone(t, b, poor))
	posted := ledger.PostingsByKey()
	for _, c := range poor {
		if posted[c+"~2"] != 1 {
			t.Fatalf("postings %v: want %s once under ~2", posted, c)
		}
	}
	if n := ledger.Calls(closed + "~2"); n != 0 || posted[closed+"~2"] != 0 || ledger.Calls(closed) != 1 {
		t.Fatalf("the closed account got a debit request under ~2 (%d), or more than its first (%d): %v", n, ledger.Calls(closed), posted)
	}
	if rec, err := b.Store.Get(ctx, closed, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Generation > 1 {
		t.Fatalf("the closed account's record: %+v %v", rec, err)
	}

	// The console's configuration now presents hard declines again: only
	// by a proposal another operator approves, the code shown.
	keepFourEyes(t, env, own["console"], tokens, "represent-hard-decline")
	term := as(env, own["olga"])
	if r := runCmd(ctx, term, "reopen", closed, "--new-attempt", "--reason", "mandate re-signed"); r.code != 1 ||
		!strings.Contains(r.stderr, "needs another operator's approval (a new attempt on a hard decline, ACCOUNT_CLOSED") || !strings.Contains(r.stderr, "approvals propose reopen --new-attempt --charge-id "+closed) {
		t.Fatalf("a direct new attempt under represent-hard-decline: %d %s", r.code, r.stderr)
	}
	r = runCmd(ctx, term, "approvals", "propose", "reopen", "--new-attempt", "--charge-id", closed, "--reason", "CHG-4412: mandate re-signed")
	if r.code != 0 || !strings.Contains(r.stdout, "state:    pending") || !strings.Contains(r.stdout, "ACCOUNT_CLOSED HARD DECLINE") ||
		!strings.Contains(r.stdout, "a new attempt on 1 hard-declined charge(s) ("+closed+" ACCOUNT_CLOSED)") || strings.Contains(r.stdout, "held back") {
		t.Fatalf("propose under represent-hard-decline: %d %s %s", r.code, r.stdout, r.stderr)
	}
	termID := proposalID(r.stdout)
	if r := runCmd(ctx, term, "approvals", "approve", termID); r.code != 1 || !strings.Contains(r.stderr, "cannot approve her own") {
		t.Fatalf("the proposer approves: %d %s", r.code, r.stderr)
	}
	if rec, _ := b.Store.Get(ctx, closed, time.Now()); rec.Generation > 1 || ledger.Calls(closed+"~2") != 0 {
		t.Fatalf("presented again without approval: %+v", rec)
	}
}

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
