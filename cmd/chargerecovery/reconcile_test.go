package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The command line end to end on the embedded backend: a statement with a
// posting the consumer never recorded, one recorded and not posted and one
// matched; the report (JSON and the metrics file), exit 1; the adoption
// and the marking, each in the audit trail; the same statement again,
// exit 0; a malformed statement, exit 2 naming its line.
func TestReconcileFindsResolvesAndForgetsBreaks(t *testing.T) {
	ctx := t.Context()
	s := newReconcileSetup(t, t.TempDir(), map[string]string{"IC_OPERATOR": "asha"}, idempotency.Options{})
	dir, env, b := s.dir, s.env, s.b
	matched, crashed, lost := s.charge("CHG-R-1"), s.charge("CHG-R-2"), s.charge("CHG-R-3")
	s.claim(t, "REF-", matched)
	s.claim(t, "", crashed) // the consumer died after the debit
	s.claim(t, "REF-", lost)
	time.Sleep(1100 * time.Millisecond) // the crashed claim's lease passes
	stmt := s.writeStatement(t, "camt053.xml", "STMT-1", s.posting(matched), s.posting(crashed))
	metricsFile := filepath.Join(dir, "recon.prom")

	r := runCmd(ctx, env, "reconcile", "--statement", stmt, "--collection-account", "FEES-001", "--json", "--metrics-file", metricsFile)
	if r.code != 1 {
		t.Fatalf("reconcile with breaks: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	var got []string
	for _, br := range rep.Breaks {
		got = append(got, string(br.Kind)+" "+br.ChargeID)
	}
	if want := []string{"posted_not_recorded CHG-R-2", "recorded_not_posted CHG-R-3"}; !slices.Equal(got, want) {
		t.Fatalf("breaks = %q, want %q", got, want)
	}
	if rep.Postings != 2 || rep.Matched != 1 || rep.Unverified != 0 {
		t.Errorf("postings %d matched %d unverified %d, want 2, 1 (its amount checked), 0", rep.Postings, rep.Matched, rep.Unverified)
	}
	for _, c := range []charge.Charge{matched, crashed, lost} {
		if strings.Contains(r.stdout, c.AccountID) {
			t.Errorf("the report prints account %s whole", c.AccountID)
		}
	}
	prom, err := os.ReadFile(metricsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`reconciliation_breaks{kind="posted_not_recorded"} 1`, `reconciliation_breaks{kind="recorded_not_posted"} 1`,
		`reconciliation_breaks{kind="posted_twice"} 0`, "reconciliation_postings 2", "reconciliation_matched 1",
		"reconciliation_matched_by_key_only 0"} {
		if !strings.Contains(string(prom), want) {
			t.Errorf("metrics file lacks %q:\n%s", want, prom)
		}
	}

	// Resolve: the crashed charge's posting adopted, the lost one marked.
	r = runCmd(ctx, env, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "INC-7: checked with the bank", crashed.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "adopted") {
		t.Fatalf("resolve %s: exit %d\n%s\n%s", crashed.ID, r.code, r.stdout, r.stderr)
	}
	rec, err := b.Store.Get(ctx, crashed.ID, time.Now())
	// DONE with the bank's reference; the notice the consumer most likely
	// never sent is kept for renotify.
	notice, kept := charge.PendingNotice(rec.Status, rec.Detail)
	if err != nil || rec.State != driver.StateDone || !kept || notice.Reference != "BANK-"+crashed.ID || len(rec.History) != 1 ||
		!strings.Contains(r.stdout, "renotify "+crashed.ID) {
		t.Fatalf("adopted record: %+v %v\n%s", rec, err, r.stdout)
	}
	r = runCmd(ctx, env, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "", lost.ID)
	if r.code != 2 {
		t.Errorf("resolve without a reason: exit %d, want 2", r.code)
	}
	r = runCmd(ctx, env, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "INC-8: posted on the 2nd", lost.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "marked resolved") {
		t.Fatalf("resolve %s: exit %d\n%s\n%s", lost.ID, r.code, r.stdout, r.stderr)
	}
	r = runCmd(ctx, env, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "again", matched.ID)
	if r.code != 1 || !strings.Contains(r.stderr, "matches the statement") {
		t.Errorf("resolve of a matched charge: exit %d, want 1 saying it matches\n%s", r.code, r.stderr)
	}
	trail, err := os.ReadFile(env["IC_AUDIT_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"result":"adopted"`, `"result":"marked"`, crashed.ID, lost.ID, "INC-7: checked with the bank"} {
		if !strings.Contains(string(trail), want) {
			t.Errorf("audit trail lacks %q:\n%s", want, trail)
		}
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 0 {
		t.Errorf("audit verify after resolving: exit %d\n%s", r.code, r.stderr)
	}

	// The same statement again: nothing open (one matched now, one resolved).
	r = runCmd(ctx, env, "reconcile", "--statement", stmt, "--collection-account", "FEES-001")
	if r.code != 0 || !strings.Contains(r.stdout, "0 breaks (1 resolved earlier)") {
		t.Fatalf("the same statement after resolving: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Bad input: exit 2, naming the line.
	bad := filepath.Join(dir, "bad.xml")
	text, _ := os.ReadFile(stmt)
	broken := strings.Replace(string(text), ">25.00<", ">25,00<", 1)
	if broken == string(text) {
		t.Fatal("the statement holds no amount 25.00 to break")
	}
	if err := os.WriteFile(bad, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCmd(ctx, env, "reconcile", "--statement", bad, "--collection-account", "FEES-001")
	if r.code != 2 || !strings.Contains(r.stderr, "bad.xml:") || !strings.Contains(r.stderr, "25,00") {
		t.Errorf("a malformed statement: exit %d, want 2 naming the file, line and text\n%s", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"reconcile"},
		{"reconcile", "--statement", stmt, "--from", "2026-12-01"},
		{"reconcile", "--statement", stmt, "--from", "2026-12-02", "--to", "2026-12-01"},
		{"reconcile", "--statement", filepath.Join(dir, "missing.xml")},
		{"reconcile", "resolve", "--statement", stmt, "--kind", "nonsense", "--reason", "x", lost.ID},
	} {
		r := runCmd(ctx, env, args...)
		if r.code == 0 {
			t.Errorf("%q: exit 0, want a refusal", args)
		}
		if strings.Contains(r.stderr, "panic") {
			t.Errorf("%q: %s", args, r.stderr)
		}
	}
}
