// The second reviewer's insider attacks on issue 51's four-eyes, kept as
// tests: each demonstrated a weakness (described as found) and now asserts
// the defence that closed it.
package main

// Second reviewer's attacks (issue 51b), as the insider olga: a shell on
// the CLI host, her own key, write access to the SQLite file, the trail
// and the proposals; not the console's key, not the pin. Each test asserts
// the SECURE behaviour: it fails when the attack succeeds.

import (
	"bytes"
	"encoding/json"
	"errors"
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
)

// atk51bOlgaLine appends a line to the trail signed with olga's own key
// (hers: she may write lines in her own name), stamped with settings
// version v (the process's own choice: Trail.SettingsVersion is exported).
func atk51bOlgaLine(t *testing.T, f *fourEyes, v int, e audit.Entry) audit.Entry {
	t.Helper()
	key, err := console.ReadKeyFile(f.own["olga"])
	if err != nil {
		t.Fatal(err)
	}
	tr, err := audit.Open(f.auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Sign, tr.RequireSign, tr.SettingsVersion = &audit.Signer{Name: "olga", Key: key}, true, v
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
