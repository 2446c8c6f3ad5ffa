package approval_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/internal/apptest"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memstore"
)

func genKey(t *testing.T) ed25519.PrivateKey { return apptest.Key(t) }

func pubOf(k ed25519.PrivateKey) string {
	return audit.PublicKeyString(k.Public().(ed25519.PublicKey))
}

// The policy lives in the backend, beside the records: whatever a
// process is given, it reads it there; only the console's key changes it,
// and a version written with the database credential alone is refused.
func TestSettingsAreKeptInTheBackendAndOnlyTheConsoleKeyChangesThem(t *testing.T) {
	ctx := t.Context()
	store := memstore.New()
	ks, err := approval.OpenKept(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ks.Load(ctx, nil); ok || err != nil {
		t.Fatalf("an empty backend keeps settings: %v %v", ok, err)
	}
	console, olga := genKey(t), genKey(t)
	s, changed, err := ks.Keep(ctx, console, approval.Settings{Policy: "reopen-new-attempt,bulk>5", Trail: "/var/lib/ic/audit.jsonl", SignIn: "token",
		Operators: []approval.Operator{{Name: "olga", Role: "operator", Key: pubOf(olga)}}, By: "console start", Why: "test"})
	if err != nil || !changed || s.Version != 1 {
		t.Fatalf("keep: %+v %v %v", s, changed, err)
	}
	// The same again writes nothing.
	if again, changed, err := ks.Keep(ctx, console, s); err != nil || changed || again.Version != 1 {
		t.Fatalf("keeping the same: %v %v %v", again.Version, changed, err)
	}
	// Another process, with no flag at all, reads it.
	other, err := approval.OpenKept(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := other.Load(ctx, nil)
	if err != nil || !ok || got.Policy != "reopen-new-attempt,bulk>5" || got.Trail != "/var/lib/ic/audit.jsonl" {
		t.Fatalf("load: %+v %v %v", got, ok, err)
	}
	// olga — with an operator's key, or a console of her own — cannot
	// turn it off.
	for _, k := range []ed25519.PrivateKey{olga, genKey(t)} {
		if _, _, err := ks.Keep(ctx, k, approval.Settings{Policy: "off", Trail: got.Trail, SignIn: "token"}); !errors.Is(err, approval.ErrSettings) {
			t.Fatalf("settings changed with a key that is not the console's: %v", err)
		}
	}
	// With the database credential she writes the next version herself,
	// through the library: every process refuses the settings then, rather
	// than take "off".
	forged := got
	forged.Version, forged.Policy = 2, "off"
	sig := ed25519.Sign(olga, []byte("anything"))
	forged.Sig = string(sig[:8])
	g, err := idempotency.NewGuard(store, idempotency.Options{Retention: 1000 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.DoTyped(ctx, g, approval.SettingsPrefix+"00000002", "settings", func(context.Context, idempotency.Run) (approval.Settings, error) {
		return forged, nil
	}, idempotency.DoOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Load(ctx, nil); !errors.Is(err, approval.ErrSettings) || !strings.Contains(err.Error(), "version 2 is not signed by the console's key") {
		t.Fatalf("a version written without the console's key was taken: %v", err)
	}
}

// handAppend appends e to the trail at path, chained to its last line as
// an insider with write access to the file would (no signature: she has
// no key but her own).
func handAppend(t *testing.T, path string, e audit.Entry) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	last := lines[len(lines)-1]
	var head struct{ Seq int64 }
	if err := json.Unmarshal(last, &head); err != nil {
		t.Fatal(err)
	}
	e.Seq, e.Prev = head.Seq+1, audit.Hash(last)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// The forgery: olga proposes a reopen with a new attempt, appends
// an approve line naming ivan — correctly chained, with her propose
// line's digest — and marks the proposal file approved. Nothing runs, and
// audit verify refuses the line; ivan's own approval (his key) runs it.
// olgaAndIvan are the settings of two operators, olga and ivan, with their
// keys and the console's, under the policy "reopen-new-attempt".
func olgaAndIvan(console, olga, ivan ed25519.PrivateKey) approval.Settings {
	return approval.Settings{Policy: "reopen-new-attempt", ConsoleKey: pubOf(console), Operators: []approval.Operator{
		{Name: "olga", Role: "operator", Key: pubOf(olga)}, {Name: "ivan", Role: "operator", Key: pubOf(ivan)}}}
}

// signedBooks opens books over w's trail under s (its policy, its keys,
// returned as a keyring), each signing as the operator named with the key
// given.
func (w *world) signedBooks(t *testing.T, s approval.Settings) (func(key ed25519.PrivateKey, name string) *approval.Book, audit.Keyring) {
	t.Helper()
	ring, err := s.Keyring()
	if err != nil {
		t.Fatal(err)
	}
	policy, _ := approval.ParsePolicy(s.Policy)
	open := func(key ed25519.PrivateKey, name string) *approval.Book {
		tr, err := audit.Open(w.path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		tr.Sign, tr.RequireSign = &audit.Signer{Name: name, Key: key}, true
		b, err := approval.Open(tr, approval.Options{Policy: &policy, Keys: ring})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return open, ring
}

// olgasReopen is a world's books signed under olgaAndIvan (fresh keys)
// and olga's proposal there, pending, to reopen its FAILED charges with a
// new attempt.
type olgasReopen struct {
	open       func(key ed25519.PrivateKey, name string) *approval.Book
	ring       audit.Keyring
	consoleKey ed25519.PrivateKey
	olgas      *approval.Book
	spec       approval.Spec
	targets    []approval.Target
	p          approval.Proposal
}

func (w *world) olgaProposesAReopen(t *testing.T) olgasReopen {
	t.Helper()
	consoleKey, olgaKey, ivanKey := genKey(t), genKey(t), genKey(t)
	open, ring := w.signedBooks(t, olgaAndIvan(consoleKey, olgaKey, ivanKey))
	olgas := open(olgaKey, "olga")
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-31: salary credited"}
	targets := w.selectTargets(t, spec, time.Now(), -1)
	p, err := olgas.Propose(olga, spec, targets)
	if err != nil || p.State != approval.Pending {
		t.Fatalf("propose: %v %v", p.State, err)
	}
	return olgasReopen{open: open, ring: ring, consoleKey: consoleKey, olgas: olgas, spec: spec, targets: targets, p: p}
}

func TestAnApprovalTheProposerWritesHerselfRunsNothing(t *testing.T) {
	w := newWorld(t, 2)
	o := w.olgaProposesAReopen(t)
	ring, olgas, spec, targets, p := o.ring, o.olgas, o.spec, o.targets, o.p
	var proposeLine audit.Entry
	es, _ := audit.Open(w.path)
	all, _ := es.All(audit.Filter{Proposal: p.ID})
	es.Close()
	proposeLine = all[0]
	// The forgery.
	handAppend(t, w.path, audit.Entry{At: time.Now().UTC(), Operator: "ivan", Role: "operator", Via: "cli", Action: "approve",
		Proposal: p.ID, Reason: spec.Reason, Result: "approved", Digest: proposeLine.Digest})
	editProposal(t, w.path, p.ID, func(m map[string]any) {
		m["state"] = "approved"
		m["decider"] = map[string]any{"name": "ivan", "role": "operator", "via": "cli"}
	})
	if _, err := olgas.Run(t.Context(), p.ID, olga, w.be, nil); !errors.Is(err, approval.ErrTampered) {
		t.Fatalf("the run of a self-approved proposal: %v", err)
	}
	if rec, _ := w.store.Get(t.Context(), targets[0].ChargeID, time.Now()); rec.Generation != 1 || rec.State != "FAILED" {
		t.Fatalf("%s reopened by a forged approval: %s generation %d", targets[0].ChargeID, rec.State, rec.Generation)
	}
	f, err := os.Open(w.path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = audit.VerifyKeyed(f, w.path, audit.Report{}, ring)
	f.Close()
	if !errors.Is(err, audit.ErrNotVouched) {
		t.Fatalf("audit verify with the installation's keys took the hand-appended approval: %v", err)
	}
}

// A genuine approval, signed by the approver's own key, is what runs.
func TestAnApprovalSignedByTheApproverRuns(t *testing.T) {
	w := newWorld(t, 2)
	olgaKey, ivanKey := genKey(t), genKey(t)
	s := olgaAndIvan(genKey(t), olgaKey, ivanKey)
	open, ring := w.signedBooks(t, s)
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-31: salary credited"}
	targets := w.selectTargets(t, spec, time.Now(), -1)
	p, err := open(olgaKey, "olga").Propose(olga, spec, targets)
	if err != nil {
		t.Fatal(err)
	}
	ivans := open(ivanKey, "ivan")
	if _, err := ivans.Approve(p.ID, approval.Actor{Name: "ivan", Role: "operator", Via: "cli"}); err != nil {
		t.Fatal(err)
	}
	p, err = ivans.Run(t.Context(), p.ID, approval.Actor{Name: "ivan", Role: "operator", Via: "cli"}, w.be, nil)
	if err != nil || p.State != approval.Done || p.Counts()["reopened"] != 2 {
		t.Fatalf("run: %v %v %v", p.State, p.Counts(), err)
	}
	f, err := os.Open(w.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := audit.VerifyKeyed(f, w.path, audit.Report{}, ring)
	if err != nil || rep.Signed != rep.Lines {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
