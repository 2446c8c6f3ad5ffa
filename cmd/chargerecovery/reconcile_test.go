package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
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

// attackSetup is reconcile_test.go's set-up: an embedded store with one
// charge DONE today, and its camt.053 (collection account FEES-001).
type attackSetup struct {
	env   map[string]string
	dir   string
	stmt  string
	g     *idempotency.Guard
	fp    *idempotency.Fingerprinter
	b     *backend.Backend
	today time.Time
}

func newAttackSetup(t *testing.T) *attackSetup {
	t.Helper()
	s := newReconcileSetup(t, t.TempDir(), map[string]string{"IC_OPERATOR": "asha"}, idempotency.Options{})
	c := s.charge("CHG-A-1")
	s.claim(t, "REF-", c)
	s.stmt = s.write(t, "camt053.xml", s.posting(c))
	return s
}

// newReconcileSetup is the embedded backend in dir, set up, with a
// fingerprint key file, the audit trail, no skew margin and extra on top
// of that environment, and a guard (a lease of 1 s, no margin, opts'
// clock) over its store: what every command-line reconcile test starts
// from.
func newReconcileSetup(t *testing.T, dir string, extra map[string]string, opts idempotency.Options) *attackSetup {
	t.Helper()
	keyFile := filepath.Join(dir, "fp.key")
	key := []byte("a-fingerprint-key-of-at-least-32-bytes-0123456789")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "recon.db"), "IC_FINGERPRINT_KEY_FILE": keyFile,
		"IC_AUDIT_FILE": filepath.Join(dir, "audit.jsonl"), "IC_SKEW_MARGIN": "0s"}
	for k, v := range extra {
		env[k] = v
	}
	ctx := t.Context()
	mustSetup(t, env)
	b, err := backend.Open(ctx, *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	fp, err := idempotency.NewFingerprinter(key)
	if err != nil {
		t.Fatal(err)
	}
	opts.Lease, opts.SkewMargin = time.Second, -1
	g, err := idempotency.NewGuard(b.Store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &attackSetup{env: env, dir: dir, g: g, fp: fp, b: b, today: time.Now().UTC().Truncate(24 * time.Hour)}
}

func (s *attackSetup) charge(id string) charge.Charge {
	return charge.Charge{ID: id, AccountID: "001234567890" + id[len(id)-1:], Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: s.today}
}

func (s *attackSetup) posting(c charge.Charge) statement.Posting {
	req := c.DebitRequest()
	return statement.Posting{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: c.Amount, BookingDate: s.today,
		Reference: "BANK-" + c.ID, Narrative: req.Narrative}
}

// claim claims each charge on the guard and, unless ref is empty (a
// consumer that died after the debit), completes it as debited with the
// bank's reference ref+its id.
func (s *attackSetup) claim(t *testing.T, ref string, cs ...charge.Charge) {
	t.Helper()
	for _, c := range cs {
		cl, err := s.g.Claim(t.Context(), c.ID, c.Fingerprint(s.fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if ref == "" {
			continue
		}
		if err := s.g.Complete(t.Context(), cl.Lease(), string(charge.Debited), ref+c.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// write writes name, the camt.053 STMT-name of the collection account
// FEES-001 for today with ps, in the set-up's folder.
func (s *attackSetup) write(t *testing.T, name string, ps ...statement.Posting) string {
	t.Helper()
	return s.writeStatement(t, name, "STMT-"+name, ps...)
}

// writeStatement is write with the statement's id.
func (s *attackSetup) writeStatement(t *testing.T, name, id string, ps ...statement.Posting) string {
	t.Helper()
	path := filepath.Join(s.dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: id, Account: "FEES-001", Created: time.Now(),
		Period: statement.Period{From: s.today, To: s.today.AddDate(0, 0, 1)}}, ps); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *attackSetup) run(ctx context.Context, args ...string) result {
	return runCmd(ctx, s.env, args...)
}

// The baseline holds: the statement alone matches (exit 0).
func TestAttackBaselineMatches(t *testing.T) {
	s := newAttackSetup(t)
	if r := s.run(t.Context(), "reconcile", "--statement", s.stmt, "--collection-account", "FEES-001"); r.code != 0 {
		t.Fatalf("baseline: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// The same statement given twice (a slip in a cron line, a file downloaded
// again under another name, or the day's camt.054 notifications read with
// the camt.053 that repeats their entries): every posting counts twice and
// every matched charge is reported posted_twice — with the action "have
// the bank refund every posting but one". Nothing tells one bank entry
// read twice (same AcctSvcrRef, same entry) from two debits.
func TestAttackSameStatementTwiceReportsPostedTwice(t *testing.T) {
	s := newAttackSetup(t)
	copyPath := filepath.Join(s.dir, "camt053-again.xml")
	data, _ := os.ReadFile(s.stmt)
	if err := os.WriteFile(copyPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, files := range []string{s.stmt + "," + s.stmt, s.stmt + "," + copyPath} {
		r := s.run(t.Context(), "reconcile", "--statement", files, "--collection-account", "FEES-001")
		if r.code != 0 {
			t.Errorf("--statement %s: exit %d, want 0 (one bank entry, read twice)\n%s", filepath.Base(files), r.code, r.stdout)
		}
	}
}

// Bad input must exit 2; these exit 1, the code that means "breaks found"
// (a cron wrapper pages the reconciliation team rather than the on-call
// for a broken feed).
func TestAttackBadInputExitsOneNotTwo(t *testing.T) {
	s := newAttackSetup(t)
	enc := filepath.Join(s.dir, "enc.xml")
	data, _ := os.ReadFile(s.stmt)
	if err := os.WriteFile(enc, []byte(strings.Replace(string(data), `encoding="UTF-8"`, `encoding="windows-1252"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"missing file":             {"--statement", filepath.Join(s.dir, "missing.xml"), "--collection-account", "FEES-001"},
		"a directory":              {"--statement", s.dir, "--collection-account", "FEES-001"},
		"wrong collection account": {"--statement", s.stmt, "--collection-account", "FEES-999"},
		"encoding windows-1252":    {"--statement", enc, "--collection-account", "FEES-001"},
	} {
		r := s.run(t.Context(), append([]string{"reconcile"}, args...)...)
		if r.code != 2 {
			t.Errorf("%s: exit %d, want 2 (bad input)\n%s", name, r.code, r.stderr)
		}
	}
}

// reconcile resolve "" (an empty CHARGE_ID — a script's unset variable:
// resolve --kind recorded_not_posted "$ID"): accepted; the run is then over
// every charge, and another charge's break is marked resolved while the
// audit trail records charge_id "".
func TestAttackResolveEmptyChargeIDOnTheCommandLine(t *testing.T) {
	s := newAttackSetup(t)
	ctx := t.Context()
	lost := s.charge("CHG-A-3")
	cl, err := s.g.Claim(ctx, lost.ID, lost.Fingerprint(s.fp))
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	if err := s.g.Complete(ctx, cl.Lease(), string(charge.Debited), "REF-X"); err != nil {
		t.Fatal(err)
	}
	r := s.run(ctx, "reconcile", "resolve", "--statement", s.stmt, "--collection-account", "FEES-001", "--kind", "recorded_not_posted", "--reason", "INC-1", "")
	if r.code != 2 {
		trail, _ := os.ReadFile(s.env["IC_AUDIT_FILE"])
		t.Fatalf("resolve \"\": exit %d, want 2\n%s\naudit trail:\n%s", r.code, r.stdout, trail)
	}
}

// Two statements with a gap (yesterday's and tomorrow's; today's not
// given): the period read is their union, [yesterday, the day after
// tomorrow), so every charge finished today — whose statement was not read
// — is reported recorded_not_posted.
func TestAttackStatementsWithAGapReportFalseBreaks(t *testing.T) {
	s := newAttackSetup(t)
	write := func(name string, from time.Time) string {
		path := filepath.Join(s.dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		other := s.charge("CHG-Z-" + name[:1])
		p := s.posting(other)
		p.BookingDate = from
		if err := statement.WriteCamt053(f, statement.StatementInfo{ID: name, Account: "FEES-001", Created: time.Now(),
			Period: statement.Period{From: from, To: from.AddDate(0, 0, 1)}}, []statement.Posting{p}); err != nil {
			t.Fatal(err)
		}
		return path
	}
	y := write("y.xml", s.today.AddDate(0, 0, -1))
	tm := write("t.xml", s.today.AddDate(0, 0, 1))
	r := s.run(t.Context(), "reconcile", "--statement", y+","+tm, "--collection-account", "FEES-001")
	if strings.Contains(r.stdout, "recorded_not_posted") && strings.Contains(r.stdout, "CHG-A-1") {
		t.Fatalf("today's statement was not given, yet today's charge is a break:\n%s", r.stdout)
	}
}

// A statement that matches (no breaks) run with --metrics-file in a
// missing directory, or --report-file naming a directory: exit 1 — the
// code for "breaks found" — and the report is not printed at all (the
// files are written before the output).
func TestAttackOutputFileErrorsExitAsBreaks(t *testing.T) {
	s := newAttackSetup(t)
	for name, extra := range map[string][]string{
		"--metrics-file in a missing directory": {"--metrics-file", filepath.Join(s.dir, "nope", "m.prom")},
		"--report-file naming a directory":      {"--report-file", s.dir},
	} {
		r := s.run(t.Context(), append([]string{"reconcile", "--statement", s.stmt, "--collection-account", "FEES-001"}, extra...)...)
		// Fixed: refused before anything is read (exit 2, naming the flag),
		// never an exit 1 that reads as "breaks found".
		if r.code != 2 || !strings.Contains(r.stderr, extra[0]) {
			t.Errorf("%s, no breaks: exit %d (want 2, a bad flag), stderr %q", name, r.code, r.stderr)
		}
	}
}

// A bank in India writes its statement's FrToDt in its own time, without
// an offset (FrDtTm 2026-11-20T00:00:00, ToDtTm 2026-11-20T23:59:59), and
// the daily job says --time-zone Asia/Kolkata (IC_TIME_ZONE), as the
// docs' example does. The period is still read as UTC: [05:30, 05:30 the
// next day) in the bank's time. A charge debited at 02:00 the next
// morning (IST) — on the next day's statement — is walked as finished in
// this period and reported recorded_not_posted, every day, for every
// charge finished between midnight and 05:30.
func TestAttack2NaiveStatementTimesIgnoreTheTimeZone(t *testing.T) {
	s := newAttackSetup(t)
	s.env["IC_TIME_ZONE"] = "Asia/Kolkata"
	ist, _ := time.LoadLocation("Asia/Kolkata")
	d := time.Date(2026, 11, 20, 0, 0, 0, 0, ist)
	doneAt := func(c charge.Charge, at time.Time) {
		g, err := idempotency.NewGuard(s.b.Store, idempotency.Options{Lease: time.Minute, Retention: 5 * 365 * 24 * time.Hour, SkewMargin: -1, Clock: storetest.NewClock(at)})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := g.Claim(t.Context(), c.ID, c.Fingerprint(s.fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if err := g.Complete(t.Context(), cl.Lease(), string(charge.Debited), "REF-"+c.ID); err != nil {
			t.Fatal(err)
		}
	}
	day := s.charge("CHG-TZ-1")  // debited 10:00 IST on the 20th, on the 20th's statement
	next := s.charge("CHG-TZ-2") // debited 02:00 IST on the 21st, on the 21st's statement
	doneAt(day, d.Add(10*time.Hour))
	doneAt(next, d.Add(26*time.Hour))
	p := s.posting(day)
	p.BookingDate = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := statement.WriteCamt053(&buf, statement.StatementInfo{ID: "STMT-TZ", Account: "FEES-001", Created: time.Now(),
		Period: statement.Period{From: time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)}},
		[]statement.Posting{p}); err != nil {
		t.Fatal(err)
	}
	xml := strings.NewReplacer("Z</FrDtTm>", "</FrDtTm>", "Z</ToDtTm>", "</ToDtTm>").Replace(buf.String()) // the bank's own time
	file := filepath.Join(s.dir, "ist.xml")
	if err := os.WriteFile(file, []byte(xml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := s.run(t.Context(), "reconcile", "--statement", file, "--collection-account", "FEES-001")
	if r.code != 0 || strings.Contains(r.stdout, next.ID) {
		t.Fatalf("the 20th (IST) under --time-zone Asia/Kolkata: exit %d; %s, debited 02:00 IST on the 21st, is a break of the 20th:\n%s%s", r.code, next.ID, r.stdout, r.stderr)
	}
}

// Under reconcile-adopt, reconcile resolve first finds the break's kind
// (approval Backend.Select: one read of the statement) and, when it is
// not an adoption, goes on to reconcile.Resolve — which reads the
// statement again and resolves whatever break the charge has then: it is
// given neither the kind found nor the break id (--kind only if typed).
// The statement read the first time shows a posting of the wrong amount
// (amount_mismatch: marked, no approval needed); the second time the
// charge's own posting (posted_not_recorded): adopted by one operator,
// without the second operator reconcile-adopt requires. (A FIFO stands for
// a statement file the operator — or the bank's feed — rewrites between
// the two reads.)
func TestAttack2FourEyesBypassedBetweenSelectAndResolve(t *testing.T) {
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	rs := newReconcileSetup(t, dir, map[string]string{"IC_CONSOLE_TOKEN_FILE": tokens},
		idempotency.Options{Clock: storetest.NewClock(time.Now().Add(-time.Hour))})
	env, b, fp, g, today, ctx := rs.env, rs.b, rs.fp, rs.g, rs.today, t.Context()
	c := charge.Charge{ID: "CHG-BYP-1", AccountID: "0012345678901", Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: today}
	if cl, err := g.Claim(ctx, c.ID, c.Fingerprint(fp)); err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	camt := func(minor int64) []byte {
		req := c.DebitRequest()
		var buf bytes.Buffer
		if err := statement.WriteCamt053(&buf, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Created: time.Now(),
			Period: statement.Period{From: today, To: today.AddDate(0, 0, 1)}},
			[]statement.Posting{{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: charge.Money{Minor: minor, Currency: "INR"}, BookingDate: today,
				Reference: "BANK-" + c.ID, Narrative: req.Narrative}}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	fifo := filepath.Join(dir, "camt053.xml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO:", err)
	}
	go func() {
		for _, body := range [][]byte{camt(9900), camt(2500)} {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			f.Write(body)
			f.Close()
			time.Sleep(300 * time.Millisecond) // the reader reaches EOF and closes
		}
	}()
	olga := as(env, own["olga"])
	keepFourEyes(t, env, own["console"], tokens, "reconcile-adopt")
	r := runCmd(ctx, olga, "reconcile", "resolve", "--statement", fifo, "--collection-account", "FEES-001", "--reason", "INC-1", c.ID)
	rec, _ := b.Store.Get(ctx, c.ID, time.Now())
	if rec.State == driver.StateDone || strings.Contains(r.stdout, "adopted") {
		t.Fatalf("under reconcile-adopt one operator adopted %s without approval: exit %d, record %s %s\n%s%s", c.ID, r.code, rec.State, rec.Status, r.stdout, r.stderr)
	}
}

// A collection account's statement read without --collection-account is
// refused (exit 2, naming the flag and the account; no metrics file
// written), rather than read as customers' statements with every charge
// recorded_not_posted. With the flag it reconciles.
func TestReconcileCollectionStatementWithoutTheFlag(t *testing.T) {
	ctx := t.Context()
	s := newReconcileSetup(t, t.TempDir(), map[string]string{"IC_OPERATOR": "asha"}, idempotency.Options{})
	dir, env := s.dir, s.env
	var posted []statement.Posting
	for _, id := range []string{"CHG-S-1", "CHG-S-2"} {
		c := s.charge(id)
		s.claim(t, "BANK-", c)
		posted = append(posted, s.posting(c))
	}
	stmt := s.writeStatement(t, "collection.xml", "STMT-S", posted...)
	metricsFile := filepath.Join(dir, "recon.prom")

	r := runCmd(ctx, env, "reconcile", "--statement", stmt, "--metrics-file", metricsFile)
	if r.code != 2 || !strings.Contains(r.stderr, "--collection-account") || !strings.Contains(r.stderr, "FEES-001") {
		t.Fatalf("a collection statement without --collection-account: exit %d, want 2 naming the flag and FEES-001\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(metricsFile); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote the metrics file (%v)", err)
	}
	t.Logf("refused: %s", r.stderr)
	r = runCmd(ctx, env, "reconcile", "--statement", stmt, "--collection-account", "FEES-001", "--metrics-file", metricsFile)
	if r.code != 0 || !strings.Contains(r.stdout, "2 matched") {
		t.Fatalf("with --collection-account FEES-001: exit %d, want 0 with 2 matched\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// The command line's reconcile output for a statement with a credit whose
// end-to-end id is the payer's account number: text, CSV, JSON, the kept
// report, the resolve under the masked id and the audit trail hold the
// number masked, never whole; our own charge's key reads as it is.
func TestReconcileOutputMasksAForeignKeyThatIsAnAccountNumber(t *testing.T) {
	const payer = "123456789012"
	ctx := t.Context()
	s := newReconcileSetup(t, t.TempDir(), map[string]string{"IC_OPERATOR": "asha"}, idempotency.Options{})
	dir, env, fp, g, today := s.dir, s.env, s.fp, s.g, s.today
	audit := filepath.Join(dir, "audit.jsonl")
	own := charge.Charge{ID: "CHG-M-1", AccountID: "009988776655", Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: today}
	cl, err := g.Claim(ctx, own.ID, own.Fingerprint(fp))
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	if err := g.Fail(ctx, cl.Lease(), string(charge.Failed), "debit declined: INSUFFICIENT_FUNDS"); err != nil {
		t.Fatal(err)
	}
	req := own.DebitRequest()
	stmt := s.writeStatement(t, "camt053.xml", "STMT-M",
		statement.Posting{BankKey: req.IdempotencyKey, Account: own.AccountID, Amount: own.Amount, BookingDate: today, Reference: "BANK-M-1", Narrative: req.Narrative},
		statement.Posting{BankKey: payer, Account: payer, Amount: charge.Money{Minor: 100000, Currency: "INR"}, BookingDate: today, Reference: "NEFT-IN-" + payer})
	report := filepath.Join(dir, "recon.json")
	check := func(what, out string) {
		t.Helper()
		if strings.Contains(out, payer) || strings.Contains(out, "56789012") {
			t.Errorf("%s shows the payer's account:\n%s", what, out)
		}
	}
	for _, args := range [][]string{{}, {"--csv"}, {"--json", "--report-file", report}} {
		r := runCmd(ctx, env, append([]string{"reconcile", "--statement", stmt, "--collection-account", "FEES-001"}, args...)...)
		if r.code != 1 {
			t.Fatalf("reconcile %q: exit %d, want 1 (breaks)\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		check("reconcile "+strings.Join(args, " "), r.stdout+r.stderr)
		if !strings.Contains(r.stdout, own.ID) || !strings.Contains(r.stdout, "********9012") {
			t.Errorf("reconcile %q does not show our charge %s and the masked key:\n%s", args, own.ID, r.stdout)
		}
	}
	kept, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	check("the kept report", string(kept))
	r := runCmd(ctx, env, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--kind", "unknown_posting",
		"--reason", "INC-9: a credit, not ours", "--json", "********9012")
	if r.code != 0 {
		t.Fatalf("resolve under the masked id: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check("reconcile resolve", r.stdout+r.stderr)
	trail, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	check("the audit trail", string(trail))
	if !strings.Contains(string(trail), "********9012") {
		t.Errorf("the trail does not name the break's masked key:\n%s", trail)
	}
}

// Under --approval-required reconcile-adopt: resolving a
// posted_not_recorded break (an adoption: money recorded as collected
// without a debit) is refused directly (exit 1, audited, naming the
// approvals propose command; the record stays IN_PROGRESS); marking a
// recorded_not_posted break still works directly; the adoption proposed
// by olga and approved by ivan adopts the posting.
func TestFourEyesReconcileAdopt(t *testing.T) {
	dir := t.TempDir()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	auditFile := filepath.Join(dir, "audit.jsonl")
	rs := newReconcileSetup(t, dir, map[string]string{"IC_CONSOLE_TOKEN_FILE": tokens}, idempotency.Options{})
	env, b, ctx := rs.env, rs.b, t.Context()
	crashed, lost := rs.charge("CHG-FE-2"), rs.charge("CHG-FE-3")
	rs.claim(t, "", crashed) // the consumer died after the debit
	rs.claim(t, "REF-", lost)
	time.Sleep(1100 * time.Millisecond) // the crashed claim's lease passes
	stmt := rs.writeStatement(t, "camt053.xml", "STMT-1", rs.posting(crashed))

	olga, ivan := as(env, own["olga"]), as(env, own["ivan"])
	keepFourEyes(t, env, own["console"], tokens, "reconcile-adopt")

	// The adoption, directly: refused, nothing done.
	r := runCmd(ctx, olga, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "INC-7: checked with the bank", crashed.ID)
	if r.code != 1 || !strings.Contains(r.stderr, "needs another operator's approval") ||
		!strings.Contains(r.stderr, "chargerecovery approvals propose reconcile --charge-id "+crashed.ID+" --statement "+stmt+" --collection-account FEES-001") {
		t.Fatalf("direct adoption under reconcile-adopt: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if rec, err := b.Store.Get(ctx, crashed.ID, time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the refused adoption wrote the record: %+v %v", rec, err)
	}
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	refused, _ := trail.All(audit.Filter{Action: "reconcile-resolve"})
	trail.Close()
	if len(refused) != 1 || refused[0].Result != "refused" || refused[0].Operator != "olga" {
		t.Fatalf("the refusal's audit line: %+v", refused)
	}

	// Marking a break resolved needs no one else.
	r = runCmd(ctx, olga, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--reason", "INC-8: posted on the 2nd", lost.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "marked resolved") {
		t.Fatalf("marking under reconcile-adopt: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Proposed by olga, approved and run by ivan.
	r = runCmd(ctx, olga, "approvals", "propose", "reconcile", "--charge-id", crashed.ID, "--statement", stmt, "--collection-account", "FEES-001",
		"--reason", "INC-7: checked with the bank", "--json")
	var p approval.Proposal
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &p) != nil || p.State != approval.Pending || len(p.Targets) != 1 || p.Targets[0].BreakID == "" {
		t.Fatalf("propose reconcile: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd(ctx, olga, "approvals", "approve", p.ID); r.code == 0 {
		t.Fatalf("olga approved her own adoption: %s", r.stdout)
	}
	r = runCmd(ctx, ivan, "approvals", "approve", p.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "1 adopted") {
		t.Fatalf("approve: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rec, err := b.Store.Get(ctx, crashed.ID, time.Now())
	if err != nil || rec.State != driver.StateDone || charge.ReferenceOf(rec.Status, rec.Detail) != "BANK-"+crashed.ID {
		t.Fatalf("adopted record: %+v %v", rec, err)
	}
}
