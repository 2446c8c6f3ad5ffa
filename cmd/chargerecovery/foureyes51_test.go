package main

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// fourEyes is an embedded installation with four-eyes kept in its backend
// (as a console's start keeps it), two charges declined for insufficient
// funds, and olga's and ivan's keys.
type fourEyes struct {
	env        map[string]string
	own        map[string]string
	tokens     string
	auditFile  string
	olga, ivan map[string]string
}

func newFourEyes(t *testing.T, policy string) *fourEyes {
	t.Helper()
	dir := t.TempDir()
	f := &fourEyes{auditFile: filepath.Join(dir, "audit.jsonl")}
	f.tokens, f.own = writeTokens(t, dir, "olga:operator", "ivan:operator")
	f.env = embeddedEnv(t, dir, "ic.db", f.auditFile)
	keepFourEyes(t, f.env, f.own["console"], f.tokens, policy)
	// A production host pins the console's public key (PinFile, root's);
	// here, as an installation without /etc does, in the environment.
	f.env["IC_CONSOLE_PUBLIC_KEY"] = pubOfKeyFile(t, f.own["console"])
	failedCharge(t, f.env, "CHG-51-1")
	failedCharge(t, f.env, "CHG-51-2")
	f.olga, f.ivan = as(f.env, f.own["olga"]), as(f.env, f.own["ivan"])
	return f
}

// embeddedEnv is an embedded installation in dir (its database there,
// named db), set up, keeping its audit trail in auditFile: the
// environment its commands run with.
func embeddedEnv(t *testing.T, dir, db, auditFile string) map[string]string {
	t.Helper()
	return mustSetup(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, db), "IC_AUDIT_FILE": auditFile})
}

func (f *fourEyes) propose(t *testing.T) string {
	t.Helper()
	r := runCmd(t.Context(), f.olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-31: salary day")
	id := proposalID(r.stdout)
	if r.code != 0 || id == "" || !strings.Contains(r.stdout, "state:    pending") {
		t.Fatalf("propose: %d %s %s", r.code, r.stdout, r.stderr)
	}
	return id
}

// proposeApproved is olga's proposal (propose), approved by ivan
// (--no-run).
func (f *fourEyes) proposeApproved(t *testing.T) string {
	t.Helper()
	id := f.propose(t)
	if r := runCmd(t.Context(), f.ivan, "approvals", "approve", id, "--no-run"); r.code != 0 {
		t.Fatalf("ivan approves: %d %s", r.code, r.stderr)
	}
	return id
}

// forgeApproval is the insider's forgery: an approve line naming ivan,
// chained to the trail's last line, carrying the propose line's digest;
// the proposal file marked approved by ivan.
func (f *fourEyes) forgeApproval(t *testing.T, id string) {
	t.Helper()
	raw, err := os.ReadFile(f.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	var digest string
	for _, l := range lines {
		var e audit.Entry
		if json.Unmarshal([]byte(l), &e) == nil && e.Action == "propose" && e.Proposal == id {
			digest = e.Digest
		}
	}
	last := lines[len(lines)-1]
	var head audit.Entry
	if err := json.Unmarshal([]byte(last), &head); err != nil || digest == "" {
		t.Fatalf("the trail: %v, digest %q", err, digest)
	}
	b, _ := json.Marshal(audit.Entry{Seq: head.Seq + 1, Prev: audit.Hash([]byte(last)), At: time.Now().UTC(), Operator: "ivan", Role: "operator",
		Via: "cli", Action: "approve", Proposal: id, Reason: "INC-31: salary day", Result: "approved", Digest: digest})
	fh, err := os.OpenFile(f.auditFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.Write(append(b, '\n'))
	fh.Close()
	f.editProposal(t, id, approvedByIvan)
}

// editProposal is the insider's edit of proposal id's file (in the
// proposals folder beside the trail): edit changes its fields, and the
// file is written back; it returns what was written.
func (f *fourEyes) editProposal(t *testing.T, id string, edit func(m map[string]any)) []byte {
	t.Helper()
	pfile := filepath.Join(f.auditFile+".proposals", id+".json")
	praw, err := os.ReadFile(pfile)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(praw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if praw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pfile, praw, 0o600); err != nil {
		t.Fatal(err)
	}
	return praw
}

// reapprove puts the proposal file back to "approved" (what ivan's
// reject changed; state, decider and why are not under the digest).
func (f *fourEyes) reapprove(t *testing.T, id string) {
	t.Helper()
	f.editProposal(t, id, func(m map[string]any) { m["state"], m["why"] = "approved", "" })
}

// approvedByIvan marks a proposal file approved, with ivan its decider.
func approvedByIvan(m map[string]any) {
	m["state"], m["decider"] = "approved", map[string]any{"name": "ivan", "role": "operator", "via": "cli"}
}

func (f *fourEyes) generation(t *testing.T, id string) (driver.State, int) {
	t.Helper()
	rec, err := openBackend(t, f.env).Store.Get(t.Context(), id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rec.State, rec.Generation
}

// Issue 51: the proposer appends a correctly chained approve line naming
// ivan and marks the file approved. Her run is refused, nothing is
// reopened, and audit verify — with every head the processes logged —
// refuses the trail; a line inserted between logged heads is refused the
// same way.
func TestAttackAHandAppendedApprovalOnTheCommandLine(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.propose(t)
	f.forgeApproval(t, id)
	r := runCmd(t.Context(), f.olga, "approvals", "run", id)
	if r.code == 0 || !strings.Contains(r.stderr, "no writer vouched for it") || !strings.Contains(r.stderr, "nothing is approved or run until the trail is whole") {
		t.Fatalf("the run of a self-approved proposal: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for _, c := range []string{"CHG-51-1", "CHG-51-2"} {
		if st, gen := f.generation(t, c); st != driver.StateFailed || gen != 1 {
			t.Fatalf("%s after the forged approval's run: %s generation %d", c, st, gen)
		}
	}
	// Later lines are written by the processes, their heads logged: the
	// forged line sits between logged heads.
	r = runCmd(t.Context(), f.ivan, "approvals", "reject", id, "--reason", "not what we agreed")
	if r.code != 0 {
		t.Fatalf("ivan rejects: %d %s", r.code, r.stderr)
	}
	heads := regexp.MustCompile(`"seq":(\d+),"sha256":"([0-9a-f]{64})"`).FindAllStringSubmatch(r.stderr, -1)
	var given []string
	for _, h := range heads {
		given = append(given, h[1]+":"+h[2])
	}
	if len(given) == 0 {
		t.Fatalf("ivan's reject logged no head: %s", r.stderr)
	}
	v := runCmd(t.Context(), f.env, "audit", "verify", "--head", strings.Join(given, ","))
	if v.code != 1 || !strings.Contains(v.stderr, "not signed, after signed lines") {
		t.Fatalf("audit verify of a trail with a hand-appended approval: %d %s %s", v.code, v.stdout, v.stderr)
	}
	// Only the chain, as before: the forgery passes — what the keys are for.
	if v := runCmd(t.Context(), f.env, "audit", "verify", "--chain-only", "--head", strings.Join(given, ",")); v.code != 0 {
		t.Fatalf("--chain-only: %d %s", v.code, v.stderr)
	}
}

// Issue 51: after the monthly rotation the new file has no policy line,
// and policy.json edited to "off" beside it was taken. The policy is in
// the backend now: a policy.json beside the trail says nothing.
func TestAPolicyFileBesideTheTrailAfterRotationChangesNothing(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	old := filepath.Join(filepath.Dir(f.auditFile), "audit-2026-11.jsonl")
	if r := runCmd(t.Context(), f.olga, "audit", "rotate", "--to", old); r.code != 0 {
		t.Fatalf("rotate: %d %s", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(f.auditFile+".proposals", "policy.json"), []byte(`{"policy":"off","by":{"name":"system"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "after the rotation")
	if r.code != 1 || !strings.Contains(r.stderr, "needs another operator's approval") {
		t.Fatalf("a direct reopen after the rotation: %d %s", r.code, r.stderr)
	}
	if st, gen := f.generation(t, "CHG-51-1"); st != driver.StateFailed || gen != 1 {
		t.Fatalf("CHG-51-1: %s generation %d", st, gen)
	}
	if v := runCmd(t.Context(), f.env, "audit", "verify", old, f.auditFile); v.code != 0 || !strings.Contains(v.stdout, "each vouched for by its writer's key") {
		t.Fatalf("verify across the rotation: %d %s %s", v.code, v.stdout, v.stderr)
	}
}

// Issue 51: with proxy sign-in the identity provider names people; the
// command line's keys (the token era) are retired with an audit line and
// approve nothing, and the command line acts no more.
func TestProxySignInRetiresTheCommandLinesKeys(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.propose(t)
	r := runCmd(t.Context(), f.env, "approvals", "policy", "reopen-new-attempt", "--reason", "SSO: sign-in by the bank's IdP",
		"--console-key-file", f.own["console"], "--console-auth", "proxy")
	if r.code != 0 {
		t.Fatalf("to proxy sign-in: %d %s", r.code, r.stderr)
	}
	for _, args := range [][]string{{"approvals", "approve", id}, {"redrive", "--charge-id", "CHG-51-1"}} {
		r := runCmd(t.Context(), f.ivan, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "is not one the backend's settings keep") {
			t.Fatalf("%v with ivan's command-line key under proxy sign-in: %d %s", args, r.code, r.stderr)
		}
	}
	if r := runCmd(t.Context(), f.env, "approvals", "approve", id, "--operator", "ivan"); r.code == 0 || !strings.Contains(r.stderr, "proxy") {
		t.Fatalf("approve by a name under proxy sign-in: %d %s", r.code, r.stderr)
	}
	r = runCmd(t.Context(), f.env, "audit", "list", "--action", "retire-tokens")
	if r.code != 0 || !strings.Contains(r.stdout, "retired") || !strings.Contains(r.stdout, "olga, ivan") {
		t.Fatalf("no audit line retires the command-line keys: %s %s", r.stdout, r.stderr)
	}
	// Their old lines still verify (their keys vouch up to the retirement).
	if v := runCmd(t.Context(), f.env, "audit", "verify"); v.code != 0 {
		t.Fatalf("verify after the keys were retired: %d %s", v.code, v.stderr)
	}
}

// --approval-ttl is bounded by the kept settings (72h by default): a
// proposal cannot be made to wait for a month.
func TestTheApprovalTTLIsBounded(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	r := runCmd(t.Context(), f.olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "x", "--approval-ttl", "720h")
	if r.code != 2 || !strings.Contains(r.stderr, "longer than the 72h0m0s the kept settings allow") {
		t.Fatalf("a month-long TTL: %d %s", r.code, r.stderr)
	}
}

// pubOfKeyFile is the public key of the key in file.
func pubOfKeyFile(t *testing.T, file string) string {
	t.Helper()
	return audit.PublicKeyString(keyOfFile(t, file).Public().(ed25519.PublicKey))
}

// keyOfFile is the private key in file.
func keyOfFile(t *testing.T, file string) ed25519.PrivateKey {
	t.Helper()
	k, err := console.ReadKeyFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
