package main

import (
	"bytes"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
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

// The insider's own handle on the SQLite file (she can read and write it:
// the CLI she runs does).
func atk51DB(t *testing.T, f *fourEyes) *sql.DB {
	t.Helper()
	name := ""
	for _, d := range sql.Drivers() {
		if d == "sqlite" || d == "sqlite3" {
			name = d
		}
	}
	db, err := sql.Open(name, f.env["IC_DB"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(t.Context(), "pragma busy_timeout = 5000"); err != nil {
		t.Fatal(err)
	}
	return db
}

func atk51Exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// atk51Hide is olga's copy aside, then deletion, of the records where
// where holds; the function returned puts them back byte for byte.
func atk51Hide(t *testing.T, db *sql.DB, where string) func() {
	t.Helper()
	atk51Exec(t, db, "attach database ? as bak", filepath.Join(t.TempDir(), "olga-bak.db"))
	atk51Exec(t, db, "create table bak.s as select * from idempotency_records where "+where)
	atk51Exec(t, db, "delete from idempotency_records where "+where)
	return func() {
		atk51Exec(t, db, "insert into idempotency_records select * from bak.s")
		atk51Exec(t, db, "detach database bak")
	}
}

// atk51V2 is four-eyes kept at "bulk>5" (v1), then at
// "reopen-new-attempt" (v2), under which olga's direct reopen with a new
// attempt is refused; and olga's handle on the SQLite file.
func atk51V2(t *testing.T) (*fourEyes, *sql.DB) {
	t.Helper()
	f := newFourEyes(t, "bulk>5")
	keepFourEyes(t, f.env, f.own["console"], f.tokens, "reopen-new-attempt")
	if r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day"); r.code != 1 {
		t.Fatalf("a direct reopen under v2: %d %s", r.code, r.stderr)
	}
	return f, atk51DB(t, f)
}

// without is env less the keys given.
func atk51Without(env map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// ATTACK 1: olga hides the settings rows (copies them aside, deletes
// them), the backend "keeps none", the CLI falls back to policy off with
// no trail at all; she reopens with a new attempt alone, then puts the
// rows back byte for byte. Secure: the reopen is refused (or at least
// leaves a trace that audit verify refuses).
func TestAttack51HiddenSettingsRowsTurnFourEyesOff(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	// The policy holds as kept.
	if r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day"); r.code != 1 {
		t.Fatalf("a direct reopen under the kept policy: %d %s", r.code, r.stderr)
	}
	putBack := atk51Hide(t, atk51DB(t, f), "key like '\\_settings/%' escape '\\'")
	// Without the trail flag and without her key: nothing is written anywhere.
	olga := atk51Without(f.env, "IC_AUDIT_FILE", "IC_OPERATOR_KEY_FILE")
	olga["IC_OPERATOR"] = "ivan" // and the record names whom she likes
	r := runCmd(t.Context(), olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day")
	putBack() // the settings as they were
	st, gen := f.generation(t, "CHG-51-1")
	v := runCmd(t.Context(), f.env, "audit", "verify")
	p := runCmd(t.Context(), f.env, "approvals", "policy")
	raw, _ := os.ReadFile(f.auditFile)
	t.Logf("reopen with the settings rows hidden: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	t.Logf("CHG-51-1 afterwards: %s generation %d; audit verify: exit %d %s; policy now: %s", st, gen, v.code, strings.TrimSpace(v.stdout), strings.TrimSpace(p.stdout))
	if r.code == 0 || st != driver.StateFailed || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: olga reopened CHG-51-1 with a new attempt alone (record %s, generation %d); the trail mentions it: %v; audit verify exit %d",
			st, gen, strings.Contains(string(raw), "CHG-51-1\",\"reason\":\"salary day\",\"result\":\"requested"), v.code)
	}
}

// ATTACK 2 (rollback): the settings went from "bulk>5" (v1) to
// "reopen-new-attempt" (v2). Olga marks v2's row IN_PROGRESS ("being
// written: not kept"), Load stops there and hands back v1, whose
// signature is good; she reopens with a new attempt alone, signed with her
// own key, then marks v2 DONE again. Secure: a later version that exists
// is never skipped (refused, not rolled back).
func TestAttack51SettingsRolledBackToAnOlderVersion(t *testing.T) {
	f, db := atk51V2(t)
	atk51Exec(t, db, "update idempotency_records set state = 'IN_PROGRESS' where key = '_settings/v00000002'")
	pol := runCmd(t.Context(), f.env, "approvals", "policy")
	r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day")
	atk51Exec(t, db, "update idempotency_records set state = 'DONE' where key = '_settings/v00000002'")
	st, gen := f.generation(t, "CHG-51-1")
	v := runCmd(t.Context(), f.env, "audit", "verify")
	t.Logf("policy seen with v2 hidden: %s", strings.SplitN(pol.stdout, "\n", 2)[0])
	t.Logf("reopen: exit %d %s", r.code, strings.SplitN(r.stdout, "\n", 2)[0])
	t.Logf("CHG-51-1: %s generation %d; audit verify (v2 back): exit %d %s", st, gen, v.code, strings.SplitN(v.stdout, "\n", 2)[0])
	if r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: with v2 hidden the CLI took v1's weaker policy; CHG-51-1 reopened alone (%s, generation %d); audit verify exit %d", st, gen, v.code)
	}
}

// ATTACK 2b (DoS): a row for the next version left IN_PROGRESS blocks
// every change of the settings by the console's own key.
func TestAttack51ABlockingNextVersionRow(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	db := atk51DB(t, f)
	atk51Exec(t, db, `insert into idempotency_records (key, state, token, fingerprint, attempt, lease_until, created_at, updated_at, expires_at, status, detail)
		select '_settings/v00000002', 'IN_PROGRESS', 'x', fingerprint, attempt, 4102444800000, created_at, updated_at, 4102444800000, '', ''
		from idempotency_records where key = '_settings/v00000001'`)
	r := runCmd(t.Context(), f.env, "approvals", "policy", "all", "--reason", "CHG-4412: stricter", "--console-key-file", f.own["console"],
		"--console-auth", "token", "--console-token-file", f.tokens)
	p := runCmd(t.Context(), f.env, "approvals", "policy")
	t.Logf("the console's key changing the policy: exit %d %s %s; policy now: %s", r.code, strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr), strings.SplitN(p.stdout, "\n", 2)[0])
	if r.code != 0 || !strings.Contains(p.stdout, "policy: reopen-new-attempt,redrive-force,reconcile-adopt,bulk>1") {
		t.Errorf("ATTACK SUCCEEDED (DoS): a hand-inserted IN_PROGRESS row for v2 stops the console's key from keeping new settings")
	}
}

// ATTACK 4: ivan approves olga's proposal (--no-run), thinks better of it
// and rejects it. Olga cuts the trail's tail (ivan's reject line, the last
// one: the chain stays whole) and puts "approved" back in the proposal
// file; her run acts on ivan's withdrawn approval. Nothing on the host
// stops this (she can write the trail and the proposals); what shows it is
// the console's witness: it saw the reject line and logged its head, and
// it finds the line gone; audit verify --head with that head refuses the
// trail. (Residual, documented in security.md.)
func TestAttack51AWithdrawnApprovalRevivedByCuttingTheTail(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.proposeApproved(t)
	before, err := os.ReadFile(f.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t.Context(), f.ivan, "approvals", "reject", id, "--reason", "wrong accounts, do not run"); r.code != 0 {
		t.Fatalf("ivan rejects: %d %s", r.code, r.stderr)
	}
	witness := audit.NewWitness(f.auditFile) // the console's, looking every Refresh
	if err := witness.Check(nil); err != nil {
		t.Fatal(err)
	}
	rejectSeq, rejectHash := witness.Seen()
	// Olga: the trail back to what it was before the reject.
	if err := os.WriteFile(f.auditFile, before, 0o600); err != nil {
		t.Fatal(err)
	}
	f.reapprove(t, id)
	r := runCmd(t.Context(), f.olga, "approvals", "run", id)
	st, gen := f.generation(t, "CHG-51-1")
	// What she cannot undo: the console's witness (its own account, every
	// Refresh) saw ivan's reject line and logged its head; the trail no
	// longer holds it.
	if err := witness.Check(nil); !errors.Is(err, audit.ErrCut) {
		t.Errorf("the console's witness did not see the cut: %v", err)
	}
	v := runCmd(t.Context(), f.env, "audit", "verify", "--head", fmt.Sprintf("%d:%s", rejectSeq, rejectHash))
	t.Logf("olga's run of the rejected proposal: exit %d %s; CHG-51-1: %s generation %d", r.code, lastLine(r.stderr), st, gen)
	if v.code != 1 || !strings.Contains(v.stderr, "is not the line logged when it was written") {
		t.Errorf("audit verify with the head the console's witness logged for ivan's reject: exit %d %s %s", v.code, v.stdout, v.stderr)
	}
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// ATTACK 5: a proposal that expires while the command line reads it gets
// an "expire" line in the name of "system", signed with the operator's
// own key: no key vouches for "system" but the console's, so audit verify
// refuses the whole trail from that line on — which olga can bring about
// at will (--approval-ttl 1s, wait, approvals list), hiding any later
// tampering behind the first break. Secure: the trail still verifies.
func TestAttack51ACommandLineExpiryBreaksVerify(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	r := runCmd(t.Context(), f.olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "x", "--approval-ttl", "1s")
	if r.code != 0 {
		t.Fatalf("propose: %d %s", r.code, r.stderr)
	}
	time.Sleep(1100 * time.Millisecond)
	l := runCmd(t.Context(), f.olga, "approvals", "list", "--all")
	v := runCmd(t.Context(), f.env, "audit", "verify")
	t.Logf("list: exit %d %s", l.code, lastLine(l.stderr))
	t.Logf("audit verify after a command-line expiry: exit %d %s %s", v.code, strings.TrimSpace(v.stdout), strings.TrimSpace(v.stderr))
	if v.code != 0 {
		t.Errorf("ATTACK SUCCEEDED (verify DoS): a command-line expire line breaks audit verify")
	}
}

// ATTACK 3 (impersonation): version 1 is "trusted as found". Olga copies
// the settings rows aside, deletes them and keeps a v1 of her own, signed
// by a console key of her own making: the same policy and trail, her own
// real key, a second key of hers named "ivan", and the real console's and
// ivan's public keys kept (under "console" and "ivan") so that every old
// line still verifies. She proposes as olga, approves and runs as "ivan".
// audit verify (the backend's keys) vouches for ivan's approval. Secure:
// a v1 that replaced the pinned one is refused, or the forged approval is.
func TestAttack51ForgedFirstVersionMakesIvanApprove(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	ctx := t.Context()
	b := openBackend(t, f.env)
	ks, err := approval.OpenKept(b.Store, nil)
	if err != nil {
		t.Fatal(err)
	}
	real, ok, err := ks.Load(ctx, nil)
	if err != nil || !ok {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mine, fakeIvan := filepath.Join(dir, "my-console.key"), filepath.Join(dir, "my-ivan.key")
	for _, p := range []string{mine, fakeIvan} {
		if r := runCmd(ctx, nil, "keygen", "--out", p); r.code != 0 {
			t.Fatal(r.stderr)
		}
	}
	myConsole, ivanKey := keyOfFile(t, mine), keyOfFile(t, fakeIvan)
	forged := real
	forged.ConsoleKey, forged.Sig = "", ""
	forged.Operators = nil
	for _, o := range real.Operators {
		if o.Name == "olga" {
			forged.Operators = append(forged.Operators, o)
		} else {
			o.Role = "viewer" // old lines verify; this key acts no more
			forged.Retired = append(forged.Retired, approval.Operator{Name: o.Name, Role: o.Role, Key: o.Key, Until: 1 << 40})
		}
	}
	forged.Operators = append(forged.Operators, approval.Operator{Name: "ivan", Role: "operator", Key: audit.PublicKeyString(ivanKey.Public().(ed25519.PublicKey))})
	forged.Retired = append(forged.Retired, approval.Operator{Name: "console", Role: "viewer", Key: real.ConsoleKey, Until: 1 << 40})
	forged.By, forged.Why = "console start", "the console's configuration at its start"
	db := atk51DB(t, f)
	atk51Exec(t, db, "delete from idempotency_records where key like '\\_settings/%' escape '\\'")
	if _, _, err := ks.Keep(ctx, myConsole, forged); err != nil {
		t.Fatal(err)
	}
	// Under the host's pin every command refuses the forged settings: no
	// proposal, no approval by "ivan", and audit verify says why.
	r := runCmd(ctx, f.olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-31: salary day")
	fake := as(f.env, fakeIvan)
	a := runCmd(ctx, fake, "approvals", "list")
	st, gen := f.generation(t, "CHG-51-1")
	v := runCmd(ctx, f.env, "audit", "verify")
	t.Logf("propose under forged settings: exit %d %s", r.code, lastLine(r.stderr))
	if r.code == 0 || a.code == 0 || gen != 1 || v.code == 0 || !strings.Contains(r.stderr, "this host pins") || !strings.Contains(v.stderr, "this host pins") {
		t.Errorf("ATTACK SUCCEEDED: a self-made v1 was taken (propose exit %d, list exit %d, CHG-51-1 %s generation %d, audit verify exit %d %s)", r.code, a.code, st, gen, v.code, v.stderr)
	}
}

// DEFENCE: ivan's signed approve line of P1, edited to name P2 (and P2's
// digest), is not vouched for: the run of P2 is refused.
func TestAttack51IvansApprovalMovedToAnotherProposal(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	p1 := f.proposeApproved(t)
	if r := runCmd(t.Context(), f.olga, "approvals", "reject", p1, "--reason", "withdrawn"); r.code != 0 {
		t.Fatalf("withdraw: %d %s", r.code, r.stderr)
	}
	p2 := f.propose(t)
	raw, _ := os.ReadFile(f.auditFile)
	var approveLine, d1, d2 string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Entry
		_ = json.Unmarshal([]byte(l), &e)
		switch {
		case e.Action == "approve" && e.Proposal == p1 && e.Result == "approved":
			approveLine, d1 = l, e.Digest
		case e.Action == "propose" && e.Proposal == p2:
			d2 = e.Digest
		}
	}
	moved := strings.ReplaceAll(strings.ReplaceAll(approveLine, p1, p2), d1, d2)
	fh, _ := os.OpenFile(f.auditFile, os.O_WRONLY|os.O_APPEND, 0)
	fh.WriteString(moved + "\n")
	fh.Close()
	f.editProposal(t, p2, approvedByIvan)
	r := runCmd(t.Context(), f.olga, "approvals", "run", p2)
	t.Logf("run of %s on ivan's approval of %s: exit %d %s", p2, p1, r.code, lastLine(r.stderr))
	if st, gen := f.generation(t, "CHG-51-1"); r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: ivan's approval of %s, moved to %s, ran it (%s generation %d)", p1, p2, st, gen)
	}
}

// DEFENCE: a target added to the proposal file after ivan approved it is
// refused at run time (the digest is checked again).
func TestAttack51ProposalEditedAfterApproval(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	r := runCmd(t.Context(), f.olga, "approvals", "propose", "reopen", "--new-attempt", "--charge-id", "CHG-51-1", "--reason", "one")
	id := proposalID(r.stdout)
	if r := runCmd(t.Context(), f.ivan, "approvals", "approve", id, "--no-run"); r.code != 0 {
		t.Fatalf("ivan approves: %d %s", r.code, r.stderr)
	}
	// A second proposal of CHG-51-2 gives olga a well-formed frozen target to copy.
	r2 := runCmd(t.Context(), f.olga, "approvals", "propose", "reopen", "--new-attempt", "--charge-id", "CHG-51-2", "--reason", "two")
	id2 := proposalID(r2.stdout)
	read := func(id string) map[string]any {
		var m map[string]any
		raw, _ := os.ReadFile(filepath.Join(f.auditFile+".proposals", id+".json"))
		_ = json.Unmarshal(raw, &m)
		return m
	}
	m, m2 := read(id), read(id2)
	m["targets"] = append(m["targets"].([]any), m2["targets"].([]any)...)
	raw, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(f.auditFile+".proposals", id+".json"), raw, 0o600)
	r = runCmd(t.Context(), f.olga, "approvals", "run", id)
	t.Logf("run with an added target: exit %d %s", r.code, lastLine(r.stderr))
	if st, gen := f.generation(t, "CHG-51-2"); r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: CHG-51-2, added after the approval, was reopened (%s generation %d)", st, gen)
	}
}

// DEFENCE: a done proposal revived (the trail cut back to its approval,
// the file made approved again with no outcomes) reopens nothing twice:
// each record changed since it was frozen.
func TestAttack51ADoneProposalRevived(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.proposeApproved(t)
	before, _ := os.ReadFile(f.auditFile)
	pfile := filepath.Join(f.auditFile+".proposals", id+".json")
	approved, _ := os.ReadFile(pfile)
	if r := runCmd(t.Context(), f.ivan, "approvals", "run", id); r.code != 0 {
		t.Fatalf("ivan runs: %d %s", r.code, r.stderr)
	}
	_, g1 := f.generation(t, "CHG-51-1")
	os.WriteFile(f.auditFile, before, 0o600)
	os.WriteFile(pfile, approved, 0o600)
	r := runCmd(t.Context(), f.olga, "approvals", "run", id)
	_, g2 := f.generation(t, "CHG-51-1")
	t.Logf("the revived run: exit %d %s %s; generation after ivan's run %d, after olga's %d", r.code, strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr), g1, g2)
	if g2 != g1 {
		t.Errorf("ATTACK SUCCEEDED: the revived proposal reopened CHG-51-1 again (generation %d -> %d)", g1, g2)
	}
}

// DEFENCE: olga's own console key cannot change the kept settings, and an
// --audit-file of her own is refused.
func TestAttack51OwnConsoleKeyAndOwnTrail(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	mine := filepath.Join(t.TempDir(), "c.key")
	runCmd(t.Context(), nil, "keygen", "--out", mine)
	r := runCmd(t.Context(), f.env, "approvals", "policy", "off", "--reason", "x", "--console-key-file", mine, "--console-auth", "token", "--console-token-file", f.tokens)
	if r.code == 0 || !strings.Contains(runCmd(t.Context(), f.env, "approvals", "policy").stdout, "policy: reopen-new-attempt") {
		t.Errorf("ATTACK SUCCEEDED: her own console key changed the policy: %d %s", r.code, r.stderr)
	}
	t.Logf("own console key: exit %d %s", r.code, strings.TrimSpace(r.stderr))
	olga := as(f.env, f.own["olga"])
	olga["IC_AUDIT_FILE"] = filepath.Join(t.TempDir(), "mine.jsonl")
	r = runCmd(t.Context(), olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "x")
	t.Logf("own trail: exit %d %s", r.code, strings.TrimSpace(r.stderr))
	if st, gen := f.generation(t, "CHG-51-1"); r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: %s generation %d", st, gen)
	}
}

// ATTACK 2c (rollback by deletion): v2 ("reopen-new-attempt") deleted from
// the database leaves v1 ("bulk>5"), whose signature is good. Every line
// carries the settings version it was written under: the trail's last
// line says v2, so the command line refuses v1.
func TestAttack51SettingsRolledBackByDeletingTheLatestVersion(t *testing.T) {
	f, db := atk51V2(t)
	atk51Exec(t, db, "delete from idempotency_records where key = '_settings/v00000002'")
	r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day")
	st, gen := f.generation(t, "CHG-51-1")
	if r.code == 0 || gen != 1 || !strings.Contains(r.stderr, "rolled back in the database") {
		t.Errorf("ATTACK SUCCEEDED: with v2 deleted the command line took v1 (exit %d %s; CHG-51-1 %s generation %d)", r.code, r.stderr, st, gen)
	}
}

// The second reviewer's insider attacks on issue 51's four-eyes (issue
// 51b), kept as tests: each demonstrated a weakness (described as found)
// and now asserts the defence that closed it. As the insider olga: a shell
// on the CLI host, her own key, write access to the SQLite file, the trail
// and the proposals; not the console's key, not the pin. Each test asserts
// the SECURE behaviour: it fails when the attack succeeds.

// atk51bOlgaLine appends a line to the trail signed with olga's own key
// (hers: she may write lines in her own name), stamped with settings
// version v (the process's own choice: Trail.SettingsVersion is exported).
func atk51bOlgaLine(t *testing.T, f *fourEyes, v int, e audit.Entry) audit.Entry {
	t.Helper()
	tr, err := audit.Open(f.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Sign, tr.RequireSign, tr.SettingsVersion = &audit.Signer{Name: "olga", Key: keyOfFile(t, f.own["olga"])}, true, v
	if e.Operator == "" {
		e.Operator, e.Role, e.Via = "olga", "operator", "cli"
	}
	out, err := tr.Append(e)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// atk51bApprovedThenRejected: olga proposes, ivan approves (--no-run) and
// then withdraws (rejects) it.
func atk51bApprovedThenRejected(t *testing.T, f *fourEyes) string {
	t.Helper()
	id := f.proposeApproved(t)
	if r := runCmd(t.Context(), f.ivan, "approvals", "reject", id, "--reason", "wrong accounts, do not run"); r.code != 0 {
		t.Fatalf("ivan rejects: %d %s", r.code, r.stderr)
	}
	return id
}

// ATTACK W1: the witness only re-reads the LAST line it saw, at its offset.
// Ivan's reject is followed by another line (anyone's, here olga's own);
// the console's witness has seen both. Olga overwrites ivan's reject line
// IN PLACE with spaces of the same length (same inode, same size, the last
// line untouched at its offset) and puts "approved" back in the proposal
// file. approvals run reads the trail without checking its chain (All
// skips a line that is not JSON): the withdrawn approval is acted on, and
// the witness — the documented detection — says nothing.
func TestAttack51bWitnessMissesAMidFileRewrite(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	witness := audit.NewWitness(f.auditFile)
	if err := witness.Check(nil); err != nil {
		t.Fatal(err)
	}
	id := atk51bApprovedThenRejected(t, f)
	if err := witness.Check(nil); err != nil { // the console's refresh sees the reject
		t.Fatal(err)
	}
	// A later line pushes the reject off the tail (the console's refresh sees it).
	atk51bOlgaLine(t, f, 1, audit.Entry{Action: "note", Result: "ok", Detail: "looking at the DLQ"})
	if err := witness.Check(nil); err != nil {
		t.Fatal(err)
	}
	// Olga: blank the reject line in place.
	raw, err := os.ReadFile(f.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	var off, n int
	for i, l := range bytes.SplitAfter(raw, []byte("\n")) {
		var e audit.Entry
		if json.Unmarshal(bytes.TrimSpace(l), &e) == nil && e.Action == "reject" && e.Proposal == id && e.Result == "rejected" {
			n = len(l) - 1
			break
		}
		_ = i
		off += len(l)
	}
	if n == 0 {
		t.Fatal("no reject line")
	}
	fh, err := os.OpenFile(f.auditFile, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(bytes.Repeat([]byte(" "), n), int64(off)); err != nil {
		t.Fatal(err)
	}
	fh.Close()

	o := atk51bRunWithdrawn(t, f, witness, id, "after the in-place rewrite")
	if !errors.Is(o.werr, audit.ErrCut) {
		t.Errorf("ATTACK SUCCEEDED (detection): the console's witness did not see ivan's reject line rewritten in the middle of the trail")
	}
	if o.run.code == 0 || o.gen != 1 {
		t.Errorf("ATTACK SUCCEEDED (money): olga ran the proposal ivan withdrew; CHG-51-1 %s generation %d (approvals run does not check the trail's chain)", o.st, o.gen)
	}
}

// atk51bRun is what follows olga's edit of the trail in W1 and W2.
type atk51bRun struct {
	werr     error  // the console's witness's check
	run, ver result // olga's approvals run; audit verify
	st       driver.State
	gen      int // CHG-51-1's record afterwards
}

// atk51bRunWithdrawn puts "approved" back in the proposal file of ivan's
// withdrawn approval and has olga run it; the witness looks, and audit
// verify reads files (none: the trail). Each is logged under what.
func atk51bRunWithdrawn(t *testing.T, f *fourEyes, witness *audit.Witness, id, what string, files ...string) atk51bRun {
	t.Helper()
	f.reapprove(t, id)
	var o atk51bRun
	o.werr = witness.Check(nil)
	o.run = runCmd(t.Context(), f.olga, "approvals", "run", id)
	o.st, o.gen = f.generation(t, "CHG-51-1")
	o.ver = runCmd(t.Context(), f.env, append([]string{"audit", "verify"}, files...)...)
	t.Logf("witness %s: %v", what, o.werr)
	t.Logf("olga's run of ivan's withdrawn approval %s: exit %d %s; CHG-51-1: %s generation %d", what, o.run.code, lastLine(o.run.stderr+o.run.stdout), o.st, o.gen)
	t.Logf("audit verify %s afterwards: exit %d %s", files, o.ver.code, strings.TrimSpace(o.ver.stderr))
	return o
}

// ATTACK W2: rotation + replay. After ivan's reject olga rotates the trail
// (audit rotate: a documented monthly routine; the new file's first line
// chains to the reject, so the witness is content). approvals run reads
// only the current file; she copies the signed propose and approve lines
// (signatures intact: they are the very bytes) into it and puts "approved"
// back in the proposal file. The witness checks only the first line of a
// replaced file, never the chain of what follows.
func TestAttack51bRotationReplaysAWithdrawnApproval(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	witness := audit.NewWitness(f.auditFile)
	id := atk51bApprovedThenRejected(t, f)
	if err := witness.Check(nil); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(filepath.Dir(f.auditFile), "audit-2026-11.jsonl")
	if r := runCmd(t.Context(), f.olga, "audit", "rotate", "--to", old); r.code != 0 {
		t.Fatalf("rotate: %d %s", r.code, r.stderr)
	}
	if err := witness.Check(nil); err != nil {
		t.Fatalf("witness after an honest rotation: %v", err)
	}
	raw, _ := os.ReadFile(old)
	var replay []byte
	for _, l := range bytes.SplitAfter(raw, []byte("\n")) {
		var e audit.Entry
		if json.Unmarshal(bytes.TrimSpace(l), &e) == nil && e.Proposal == id && (e.Action == "propose" || (e.Action == "approve" && e.Result == "approved")) {
			replay = append(replay, l...)
		}
	}
	fh, err := os.OpenFile(f.auditFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.Write(replay)
	fh.Close()

	o := atk51bRunWithdrawn(t, f, witness, id, "after the rotation and the replay", old, f.auditFile)
	if !errors.Is(o.werr, audit.ErrCut) {
		t.Errorf("ATTACK SUCCEEDED (detection): the witness accepted replayed lines that do not chain")
	}
	if o.run.code == 0 || o.gen != 1 {
		t.Errorf("ATTACK SUCCEEDED (money): olga ran the proposal ivan withdrew, after a rotation; CHG-51-1 %s generation %d", o.st, o.gen)
	}
}

// ATTACK S1: rollback past the "last line's version" check. Settings went
// from bulk>5 (v1) to reopen-new-attempt (v2). Olga deletes v2's row; the
// CLI refuses (the trail's last line says v2). She appends ONE line of her
// own, signed with her own key, stamped settings=1: the last line now says
// v1, the CLI takes v1's weaker policy, and she reopens with a new attempt
// alone (the operate backstop reads the settings without the pin and finds
// v1 too). She puts the v2 row back.
func TestAttack51bRollbackPastTheLastLineCheckWithHerOwnLine(t *testing.T) {
	f, db := atk51V2(t)
	putBack := atk51Hide(t, db, "key = '_settings/v00000002'")
	pre := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day")
	if pre.code == 0 || !strings.Contains(pre.stderr, "rolled back") {
		t.Fatalf("the documented check: %d %s", pre.code, pre.stderr)
	}
	atk51bOlgaLine(t, f, 1, audit.Entry{Action: "note", Result: "ok", Detail: "checking the DLQ"})
	r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "salary day")
	putBack()
	st, gen := f.generation(t, "CHG-51-1")
	v := runCmd(t.Context(), f.env, "audit", "verify")
	p := runCmd(t.Context(), f.env, "approvals", "policy")
	t.Logf("with v2 deleted and one line of hers at v1: reopen exit %d %s", r.code, strings.SplitN(r.stdout+r.stderr, "\n", 2)[0])
	t.Logf("CHG-51-1: %s generation %d; policy now: %s; audit verify: exit %d %s", st, gen, strings.SplitN(p.stdout, "\n", 2)[0], v.code, strings.TrimSpace(v.stderr))
	if r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED (money moved alone): settings v2 rolled back to v1 past the CLI's check by one self-signed line at settings=1; CHG-51-1 %s generation %d", st, gen)
	}
}

// ATTACK D1: one line of olga's own, stamped settings=999 (a version that
// never existed). Every command-line process — ivan's included — now
// refuses to act ("the settings were rolled back in the database") until
// the settings reach version 999 or someone cuts the trail; audit verify
// accepts her line.
func TestAttack51bAFutureVersionLineLocksEveryoneOut(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	atk51bOlgaLine(t, f, 999, audit.Entry{Action: "note", Result: "ok", Detail: "nothing to see"})
	r := runCmd(t.Context(), f.ivan, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-32")
	v := runCmd(t.Context(), f.env, "audit", "verify")
	t.Logf("ivan after olga's settings=999 line: exit %d %s", r.code, lastLine(r.stderr+r.stdout))
	t.Logf("audit verify: exit %d %s %s", v.code, strings.SplitN(v.stdout, "\n", 2)[0], strings.TrimSpace(v.stderr))
	if r.code != 0 && strings.Contains(r.stderr, "rolled back") {
		t.Errorf("ATTACK SUCCEEDED (DoS): one self-signed line with settings=999 stops every command-line process")
	}
	if v.code == 0 {
		t.Errorf("ATTACK SUCCEEDED (trace): audit verify accepts a line under settings version 999, which the backend never kept")
	}
}

// CHECK N1: the proposal file's "needs" made "" (no approval needed) and
// its state approved: needs is under the digest — refused (expected to
// hold).
func TestAttack51bNeedsEmptiedInTheProposalFile(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.propose(t)
	f.editProposal(t, id, func(m map[string]any) { m["state"], m["needs"] = "approved", "" })
	r := runCmd(t.Context(), f.olga, "approvals", "run", id)
	st, gen := f.generation(t, "CHG-51-1")
	t.Logf("run with needs emptied: exit %d %s; CHG-51-1 %s generation %d", r.code, lastLine(r.stderr), st, gen)
	if r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: a proposal whose file says needs \"\" ran without approval")
	}
}

// CHECK E1: the proposal's expiry moved on in its file (expired, then
// "revived"): expires is under the digest — refused (expected to hold).
func TestAttack51bExpiryMovedOn(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.propose(t)
	f.editProposal(t, id, func(m map[string]any) { m["expires"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano) })
	_ = runCmd(t.Context(), f.olga, "approvals", "list") // expires it, with its line
	if r := runCmd(t.Context(), f.ivan, "approvals", "approve", id); r.code == 0 {
		t.Errorf("ATTACK SUCCEEDED: a proposal whose expiry was edited was approved: %s", r.stdout)
	}
	_, gen := f.generation(t, "CHG-51-1")
	if gen != 1 {
		t.Errorf("ATTACK SUCCEEDED: reopened (generation %d)", gen)
	}
	_ = driver.StateFailed
}

// atk51bDigest is service/approval's digest (unexported there; it is a
// SHA-256 of public fields, which anyone can compute).
func atk51bDigest(p approval.Proposal) string {
	raw, _ := json.Marshal(struct {
		ID       string
		Spec     approval.Spec
		Proposer string
		Targets  []approval.Target
		Needs    string
		Expires  time.Time
		Held     []approval.Held `json:",omitempty"`
	}{p.ID, p.Spec, strings.ToLower(strings.TrimSpace(p.Proposer.Name)), p.Targets, p.Needs, p.Expires.UTC(), p.Held})
	return audit.Hash(raw)
}

// ATTACK N2: "needs" is under the digest, but the digest is vouched for by
// the PROPOSER's own propose line — which olga signs with her own key. She
// empties needs in her pending proposal's file (state approved) and appends
// a second propose line of her own, signed by her, carrying the new digest.
// approvals run never recomputes needs from the kept policy: "no approval
// needed", and her run reopens both charges with a new attempt alone,
// through the fenced path that skips operate's backstop. Only the shipped
// CLI, her key, and the files she may write; nothing written to the DB.
func TestAttack51bSelfVouchedProposalWithNoNeeds(t *testing.T) {
	f := newFourEyes(t, "reopen-new-attempt")
	id := f.propose(t)
	praw := f.editProposal(t, id, func(m map[string]any) { m["state"], m["needs"] = "approved", "" })
	var p approval.Proposal
	if err := json.Unmarshal(praw, &p); err != nil {
		t.Fatal(err)
	}
	atk51bOlgaLine(t, f, 1, audit.Entry{Action: "propose", Proposal: id, Reason: p.Spec.Reason, Result: "approved", Digest: atk51bDigest(p)})
	r := runCmd(t.Context(), f.olga, "approvals", "run", id)
	st, gen := f.generation(t, "CHG-51-1")
	v := runCmd(t.Context(), f.env, "audit", "verify")
	t.Logf("olga's run of her own proposal, needs emptied and re-vouched by her own propose line: exit %d %s; CHG-51-1: %s generation %d", r.code, lastLine(r.stderr+r.stdout), st, gen)
	t.Logf("audit verify afterwards: exit %d %s %s", v.code, strings.SplitN(v.stdout, "\n", 2)[0], strings.TrimSpace(v.stderr))
	if r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED (money moved alone): approvals run took needs \"\" from a proposal olga vouched for herself; CHG-51-1 %s generation %d", st, gen)
	}
	if v.code == 0 {
		t.Errorf("ATTACK SUCCEEDED (trace): audit verify accepts the trail of a new attempt that nobody approved")
	}
}

// ATTACK P1: needs is decided at propose time, never again. Under v1
// (bulk>5) olga proposes a reopen with a new attempt of the two charges:
// no approval needed, approved at once. The console tightens the policy to
// reopen-new-attempt (v2) — then olga runs her proposal: the run does not
// ask the kept policy, and two new attempts go out that v2 wants approved.
func TestAttack51bProposalFromBeforeTheTighteningRunsAlone(t *testing.T) {
	f := newFourEyes(t, "bulk>5")
	r := runCmd(t.Context(), f.olga, "approvals", "propose", "reopen", "--new-attempt", "--reason", "INC-31: salary day")
	id := proposalID(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("propose under v1: %d %s %s", r.code, r.stdout, r.stderr)
	}
	keepFourEyes(t, f.env, f.own["console"], f.tokens, "reopen-new-attempt")
	if r := runCmd(t.Context(), f.olga, "reopen", "CHG-51-1", "--new-attempt", "--reason", "x"); r.code != 1 {
		t.Fatalf("a direct reopen under v2: %d %s", r.code, r.stderr)
	}
	r = runCmd(t.Context(), f.olga, "approvals", "run", id)
	st, gen := f.generation(t, "CHG-51-1")
	t.Logf("olga runs, under v2, the proposal she made under v1: exit %d %s; CHG-51-1 %s generation %d", r.code, lastLine(r.stderr+r.stdout), st, gen)
	if r.code == 0 || gen != 1 {
		t.Errorf("ATTACK SUCCEEDED (money moved alone, timing): a proposal approved at once under the old policy ran after the policy was tightened; CHG-51-1 %s generation %d", st, gen)
	}
}

// CHECK R1: a direct redrive --force under redrive-force (expected refused).
func TestAttack51bDirectRedriveForce(t *testing.T) {
	f := newFourEyes(t, "redrive-force")
	r := runCmd(t.Context(), f.olga, "redrive", "--force", "--charge-id", "CHG-51-1")
	t.Logf("direct redrive --force: exit %d %s", r.code, lastLine(r.stderr))
	if r.code == 0 || !strings.Contains(r.stderr, "needs another operator's approval") {
		t.Errorf("ATTACK SUCCEEDED: redrive --force done alone under redrive-force: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

// NOTE B1 (by design): bulk>1 counts per proposal: two redrives of one
// charge each need nobody (a single redrive is a direct action anyway).
// Logged, not failed.
func TestAttack51bBulkSplitNote(t *testing.T) {
	f := newFourEyes(t, "bulk>1")
	for _, c := range []string{"CHG-51-1", "CHG-51-2"} {
		r := runCmd(t.Context(), f.olga, "approvals", "propose", "redrive", "--charge-id", c, "--reason", "split")
		t.Logf("propose a redrive of %s alone under bulk>1: exit %d, %s", c, r.code, regexp.MustCompile(`state: +\w+`).FindString(r.stdout))
	}
}

// dlq purge deletes DLQ entries for good (with --force, charges that
// could still be collected). It opened no session: where the backend
// keeps four-eyes settings anyone deleted entries under any --operator
// NAME, and the deletion was not a line of the one audit trail (only a
// log line on stderr) — four-eyes.md lists dlq purge among the commands
// whose every action is in it, signed by its writer. It is now done as
// every other action: the operator named by her key, the lines in the
// trail.
func TestAttack53MovedDLQPurgeIsInTheTrailSignedByItsOperator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "purge.db"), "IC_AUDIT_FILE": auditFile, "IC_CONSOLE_TOKEN_FILE": tokens}
	ctx := t.Context()
	mustSetup(t, env)
	keepFourEyes(t, env, own["console"], tokens, "bulk>5")
	b := openBackend(t, env)
	deadLetter(t, b.Queue, []byte(`{"chargeId":"CHG-P53-1"}`), queue.Reason{Code: "debit_failed", Detail: "bank down"})
	r := runCmd(ctx, env, "dlq", "list", "--json")
	var list struct{ Entries []dlqEntry }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Entries) != 1 {
		t.Fatalf("dlq list: %d %s %s", r.code, r.stdout, r.stderr)
	}
	id := list.Entries[0].ID

	// A name is not an identity where the trail is signed.
	anyone := map[string]string{}
	for k, v := range env {
		anyone[k] = v
	}
	anyone["IC_OPERATOR"] = "ivan"
	if r := runCmd(ctx, anyone, "dlq", "purge", "--force", id); r.code != 2 || !strings.Contains(r.stderr, "--operator-key-file") {
		t.Fatalf("dlq purge by a name alone: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if d, err := b.Queue.Depth(ctx); err != nil || d.DLQ != 1 {
		t.Fatalf("the entry was purged by a name alone: %+v %v", d, err)
	}
	if r := runCmd(ctx, as(env, own["olga"]), "dlq", "purge", "--force", id); r.code != 0 {
		t.Fatalf("dlq purge with her key: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = runCmd(ctx, env, "audit", "list", "--action", "dlq purge", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"operator":"olga"`) || !strings.Contains(r.stdout, "CHG-P53-1") || !strings.Contains(r.stdout, `"result":"purged"`) {
		t.Fatalf("the purge is not in the trail: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 0 || !strings.Contains(r.stdout, "each vouched for by its writer's key") {
		t.Fatalf("verify: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

// Issue 51: a trail line whose reason, charge id, operator and detail
// hold bidirectional controls (U+202E reverses what follows, U+2066 opens
// an isolate) is listed with them escaped, never raw: the row reads as it
// is stored.
func TestAuditListEscapesBidirectionalControls(t *testing.T) {
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trail.Append(audit.Entry{Operator: "olga\u202e", Via: "cli", Action: "reopen", ChargeID: "CHG-\u20661",
		Reason: "INC-9 \u202e1-GHC\u2066 approved", Detail: "zero\u200bwidth", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	trail.Close()
	r := runCmd(t.Context(), map[string]string{"IC_AUDIT_FILE": auditFile}, "audit", "list")
	if r.code != 0 {
		t.Fatalf("audit list: %d %s", r.code, r.stderr)
	}
	if strings.ContainsAny(r.stdout, "\u202e\u2066\u200b") {
		t.Fatalf("audit list printed a bidirectional or invisible character raw:\n%q", r.stdout)
	}
	for _, want := range []string{`olga\u202e`, `CHG-\u20661`, `INC-9 \u202e1-GHC\u2066 approved`, `zero\u200bwidth`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("audit list does not show %s:\n%s", want, r.stdout)
		}
	}
}
