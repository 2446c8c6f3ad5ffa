package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/opsserver"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/app/service/scenariotest"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// decisionLine is the part of serve's per-message log line the test reads.
type decisionLine struct {
	Time         time.Time `json:"time"`
	MessageID    string    `json:"message_id"`
	ReceiveCount int       `json:"receive_count"`
	Outcome      string    `json:"outcome"`
	Reason       string    `json:"reason"`
	Alert        bool      `json:"alert"`
	LatencyMS    float64   `json:"latency_ms"`
}

// started is when the handling began: the line is written when it ends,
// and a receive that began before an outage must not count as one within
// it (a charge received just before the bank's window opens, answered
// PENDING just after it, is received again in the window: one receive
// there, not two).
func (d decisionLine) started() time.Time {
	return d.Time.Add(-time.Duration(d.LatencyMS * float64(time.Millisecond)))
}

// checkReceiveGrowth fails the test for a message whose receive count grew
// by more than one between start and end (an outage), and shows every
// line the serve processes wrote about it.
func checkReceiveGrowth(t *testing.T, decisions []decisionLine, logs []string, name string, start, end time.Time) {
	t.Helper()
	rs := make([]scenariotest.Receipt, len(decisions))
	straddled := 0
	for i, d := range decisions {
		rs[i] = scenariotest.Receipt{At: d.started(), ID: d.MessageID, Count: d.ReceiveCount}
		if d.started().Before(start) && !d.Time.Before(start) {
			straddled++
		}
	}
	violations, handled := scenariotest.GrewDuring(rs, start, end)
	t.Logf("%s: %d messages handled, %d handlings began before it and ended within it", name, handled, straddled)
	for _, v := range violations {
		t.Errorf("%s during the %s (%s to %s)", v, name, start.Format("15:04:05.000"), end.Format("15:04:05.000"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			for line := range strings.Lines(string(b)) {
				if strings.Contains(line, v.ID) {
					t.Logf("%s: %s", filepath.Base(l), strings.TrimSpace(line))
				}
			}
		}
	}
}

func readDecisions(t *testing.T, paths ...string) []decisionLine {
	t.Helper()
	var out []decisionLine
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var d decisionLine
			if json.Unmarshal(sc.Bytes(), &d) == nil && d.MessageID != "" && d.Outcome != "" {
				out = append(out, d)
			}
		}
		f.Close()
	}
	return out
}

// bankOutageScenario runs two real serve processes on one queue against a
// simulator that behaves like a real bank: 409 while a key is in progress,
// posts slower than the client's timeout that post all the same, answers
// lost after posting (503, 502, reset), 202 PENDING answers that post a
// second later, declines, a 10 s 401 window (an expired gateway token) and
// a 60 s 503 window (end of day) through which /healthz keeps answering
// 200, with the queue's redrive limit at 4. Every non-declined charge must
// be posted exactly once and DONE, every declined one FAILED and
// dead-lettered, nothing else dead-lettered, and no message's receive
// count may grow by more than one during either window.
func bankOutageScenario(t *testing.T, env map[string]string) {
	const (
		charges  = 200
		dupRatio = 0.3
		w401     = 10 * time.Second
		w503     = 60 * time.Second
	)
	faults := corebanksim.Faults{
		Latency: 5 * time.Millisecond, InProgress409: true,
		SlowRate: 0.04, SlowLatency: 2 * time.Second, // the client gives up after 500ms
		TransientAfterPostRate: 0.03, BadGatewayAfterPostRate: 0.03, ResetAfterPostRate: 0.03,
		PendingRate: 0.03, PendingLatency: time.Second,
		DeclineAccounts: map[string]string{},
	}
	ledger := corebanksim.NewLedger(faults)
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(bank.Close)
	for k, v := range map[string]string{
		"IC_COREBANK_URL": bank.URL, "IC_COREBANK_TIMEOUT": "500ms", "IC_COREBANK_ENQUIRY": "true",
		"IC_CIRCUIT_PROBE": "500ms", "IC_CIRCUIT_PROBE_MAX": "2s", "IC_CIRCUIT_FAILURES": "5",
		"IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s", "IC_LEASE": "6s", "IC_MAX_RECEIVE": "4",
		"IC_CONCURRENCY": "8", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_FORMAT": "json", "IC_LOG_LEVEL": "info",
	} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}

	// The workload: 200 charges, 30% sent twice, one in ten declined (half
	// of those sent twice).
	due := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	run := backend.RandomID()
	all := make([]charge.Charge, charges)
	declined := map[string]bool{}
	for i := range all {
		acct := fmt.Sprintf("00%010d", 1000+i)
		all[i] = charge.Charge{ID: fmt.Sprintf("CHG-%s-%03d", run, i), AccountID: acct,
			Amount: charge.Money{Minor: 2500 + int64(i), Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: due}
		if i%20 == 2 || i%20 == 13 {
			faults.DeclineAccounts[acct] = "ACCOUNT_CLOSED"
			declined[all[i].ID] = true
		}
	}
	ledger.SetFaults(faults)
	copies := map[string]int{}
	waves := make([][][]byte, 3)
	for i, c := range all {
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		n := 1
		if float64(i%10) < dupRatio*10 {
			n = 2
		}
		copies[c.ID] = n
		for range n {
			waves[i%3] = append(waves[i%3], body)
		}
	}
	ctx := t.Context()
	b, err := backend.Open(ctx, *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	send := func(bodies [][]byte) {
		msgs := make([]queue.Outgoing, len(bodies))
		for i, body := range bodies {
			msgs[i] = queue.Outgoing{Body: body}
		}
		if _, err := b.Queue.SendBatch(ctx, msgs); err != nil {
			t.Fatalf("send: %v", err)
		}
	}

	dir := t.TempDir()
	logs := []string{filepath.Join(dir, "serve-1.log"), filepath.Join(dir, "serve-2.log")}
	var procs []*exec.Cmd
	for _, l := range logs {
		procs = append(procs, childLogged(t, env, l, "serve"))
	}
	outage := func(status int, d time.Duration, healthy bool) (start, end time.Time) {
		f := faults
		f.OutageStatus, f.OutageUntil, f.OutageHealthy = status, time.Now().Add(d), healthy
		ledger.SetFaults(f)
		return time.Now(), f.OutageUntil
	}

	send(waves[0])
	time.Sleep(3 * time.Second)
	s401, e401 := outage(401, w401, false)
	send(waves[1]) // a backlog arrives while the gateway refuses us
	time.Sleep(w401 + 3*time.Second)
	s503, e503 := outage(503, w503, true) // the gateway's /healthz says OK throughout
	send(waves[2])                        // and more during the end-of-day window
	time.Sleep(w503)

	// After the windows: everything finishes.
	deadline := time.Now().Add(120 * time.Second)
	for {
		unfinished := 0
		for _, c := range all {
			rec, err := b.Store.Get(ctx, c.ID, time.Now())
			if err != nil || rec.State == driver.StateInProgress {
				unfinished++
			}
		}
		d, err := b.Queue.Depth(ctx)
		main := d.Waiting + d.InFlight
		if err == nil && unfinished == 0 && main == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not finished 120s after the outage: %d charges unfinished, %d messages left (logs in %s)", unfinished, main, dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopAll(t, procs...)

	// Money and records.
	posted := ledger.PostingsByKey()
	wantDLQ := 0
	for _, c := range all {
		rec, err := b.Store.Get(ctx, c.ID, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
		if declined[c.ID] {
			wantDLQ += copies[c.ID]
			if rec.State != driver.StateFailed || posted[c.ID] != 0 {
				t.Errorf("declined %s: record %s, posted %d; want FAILED and never posted", c.ID, rec.State, posted[c.ID])
			}
			continue
		}
		if rec.State != driver.StateDone || posted[c.ID] != 1 {
			t.Errorf("%s: record %s %s, posted %d times; want DONE and posted exactly once", c.ID, rec.State, rec.Detail, posted[c.ID])
		}
	}
	if len(posted) != charges-len(declined) {
		t.Errorf("ledger has %d keys, want %d", len(posted), charges-len(declined))
	}
	if d := ledger.DuplicateRequests(); len(d) != 0 {
		t.Errorf("core banking was asked to debit charges it had already confirmed: %v", d)
	}

	// The DLQ holds the declined charges' messages and nothing else.
	r := runCmd(ctx, env, "redrive", "--dry-run", "--json")
	var rep queue.RedriveReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("redrive --dry-run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	for reason, n := range rep.ByCode {
		if reason != "debit_failed" && reason != "duplicate_failed" {
			t.Errorf("DLQ holds %d message(s) for %q: an outage or an ambiguous answer dead-lettered work", n, reason)
			// Say why: the history of every message received 3 times or more.
			byMsg := map[string][]decisionLine{}
			for _, d := range readDecisions(t, logs...) {
				byMsg[d.MessageID] = append(byMsg[d.MessageID], d)
			}
			for id, ds := range byMsg {
				if len(ds) < 3 {
					continue
				}
				for _, d := range ds {
					t.Logf("%s %s receive %d: %s (%s)", id, d.Time.Format("15:04:05.000"), d.ReceiveCount, d.Outcome, d.Reason)
				}
			}
		}
	}
	// Counted by source message: a dead-letter forward is at least once (on
	// SQS the send to the DLQ is repeated when the delete's answer was
	// lost), and dlq list folds such a repeat into one entry with copies.
	r = runCmd(ctx, env, "dlq", "list", "--json", "--limit", "100000")
	var listed struct {
		Total   int        `json:"total"`
		Entries []dlqEntry `json:"entries"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil {
		t.Fatalf("dlq list: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if listed.Total != wantDLQ {
		t.Errorf("DLQ holds %d source messages (%d entries, %v), want the %d of declined charges", listed.Total, rep.Seen, rep.ByCode, wantDLQ)
	}
	for _, e := range listed.Entries {
		if !declined[e.ChargeID] {
			t.Errorf("DLQ entry %s is for %s, which was not declined", e.ID, e.ChargeID)
		}
	}

	// No message's receive count grew by more than one during either
	// outage, whatever /healthz said, and the 401s raised alerts.
	decisions := readDecisions(t, logs...)
	if len(decisions) < charges {
		t.Fatalf("only %d decision lines in the logs", len(decisions))
	}
	alerts := 0
	checkReceiveGrowth(t, decisions, logs, "401 window", s401, e401)
	checkReceiveGrowth(t, decisions, logs, "503 window", s503, e503)
	for _, d := range decisions {
		if d.Alert && !d.Time.Before(s401) && d.Time.Before(e401.Add(time.Second)) {
			alerts++
		}
	}
	if alerts == 0 {
		t.Error("the 401 window raised no alert in the logs")
	}
	text := ""
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		text += string(b)
	}
	if !strings.Contains(text, `"circuit":"open"`) || !strings.Contains(text, `"circuit":"closed"`) {
		t.Error("the logs do not show the circuit opening and closing")
	}
	t.Logf("decisions %d, alerts in the 401 window %d, DLQ %v", len(decisions), alerts, rep.ByCode)
}

func TestBankOutagesOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	bankOutageScenario(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "bank.db")})
}

func TestBankOutagesOnTheAWSEmulator(t *testing.T) {
	emulatorInParallel(t)
	env := awsSetup(t, "bank", "--visibility", "3s", "--max-receive", "4")
	env["IC_MAX_RECEIVE"] = "4"
	bankOutageScenario(t, env)
}

// awsSetup names fresh queues and a table, creates them with
// `setup setupArgs...`, and returns the environment that selects them.
func awsSetup(t *testing.T, prefix string, setupArgs ...string) map[string]string {
	t.Helper()
	name := awstest.Name(prefix)
	env := map[string]string{"IC_BACKEND": "aws", "IC_QUEUE": name, "IC_DLQ": name + "-dlq", "IC_TABLE": name}
	if r := runCmd(t.Context(), env, append([]string{"setup"}, setupArgs...)...); r.code != 0 {
		t.Fatalf("setup: %s", r.stderr)
	}
	return env
}

// emulatorInParallel is useEmulator for a test that runs in parallel with
// others: when the process environment already points the AWS chain at the
// test emulator (scripts/with-moto.sh does), nothing needs setting.
func emulatorInParallel(t *testing.T) {
	t.Helper()
	awstest.Config(t) // fails in CI / skips elsewhere when unreachable
	if os.Getenv("AWS_ENDPOINT_URL") == os.Getenv(awstest.EndpointEnv) && os.Getenv("AWS_REGION") != "" && os.Getenv("AWS_ACCESS_KEY_ID") != "" {
		t.Parallel()
		return
	}
	useEmulator(t)
}

func TestReadyzSaysWhyWhileTheCircuitIsOpenInWordsOnly(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	br, err := circuit.New(circuit.Options{Threshold: 2, Logger: quiet, Summarize: pipeline.BankCause})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(pipeline.Ports{Source: memqueue.New(memqueue.Options{}), Store: memstore.New(),
		Bank: pipeline.Bank{Debiter: corebanksim.NewLedger(corebanksim.Faults{}), Breaker: br}, Notifier: notifysim.NewRecorder(0, quiet)},
		pipeline.Config{Concurrency: 1, Visibility: 30 * time.Second, Lease: time.Minute, Retention: idempotency.DefaultRetention,
			ShutdownTimeout: time.Second, NotifyTimeout: time.Second},
		pipeline.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var backendDown atomic.Bool
	var log logbuf.Buffer
	ops, err := opsserver.Start("127.0.0.1:0", metrics.New(), p.Ready(func(context.Context) error {
		if backendDown.Load() {
			return errors.New("dial tcp 10.20.30.40:5432: connect: connection refused (postgres://app@db.internal/bank)")
		}
		return nil
	}), slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	url := "http://" + ops.Addr() + "/readyz"
	if code, body := httpGet(t, url); code != 200 {
		t.Fatalf("closed circuit: %d %s", code, body)
	}
	backendDown.Store(true)
	code, body := httpGet(t, url)
	if code != 503 || !strings.Contains(body, "does not answer") || strings.Contains(body, "10.20.30.40") || strings.Contains(body, "db.internal") {
		t.Errorf("backend down: %d %q, want 503 in words without the address", code, body)
	}
	backendDown.Store(false)
	bankSaid := &charge.BankError{Kind: charge.BankUnavailable, Status: 503, Err: errors.New("maintenance of host cbs-prod-07.bank.internal; account 001234567890")}
	tk, _ := br.Allow() // one failed call
	br.Record(tk, fmt.Errorf("corebank: debit CHG-1 at https://cbs-prod-07.bank.internal/v1/debits: %w", bankSaid))
	tk, _ = br.Allow()
	br.Record(tk, fmt.Errorf("corebank: debit CHG-2 at https://cbs-prod-07.bank.internal/v1/debits: %w", bankSaid))
	code, body = httpGet(t, url)
	if code != 503 || !strings.Contains(body, "circuit open") || !strings.Contains(body, "HTTP 503") || !strings.Contains(body, "not receiving") {
		t.Fatalf("open circuit: %d %q, want 503 saying the circuit is open and why", code, body)
	}
	for _, secret := range []string{"cbs-prod-07", "maintenance", "001234567890", "https://"} {
		if strings.Contains(body, secret) {
			t.Errorf("/readyz shows %q: %s", secret, body)
		}
	}
	if !strings.Contains(log.String(), "maintenance of host cbs-prod-07") {
		t.Errorf("the log lacks the detail:\n%s", log.String())
	}

}

// corebank statement, reverse and drop against the simulator: the file is
// owner-only and reads back (reconcile's reader, collection-account side)
// as the postings, then with the reversal, then without the lost one.
func TestCorebankStatementReverseDrop(t *testing.T) {
	ctx := t.Context()
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	for i, id := range []string{"CHG-S-1", "CHG-S-2", "CHG-S-3"} {
		if _, err := ledger.Debit(ctx, charge.DebitRequest{IdempotencyKey: id, AccountID: "00123456789" + string(rune('1'+i)),
			Amount: charge.Money{Minor: 2500, Currency: "INR"}, ChargeType: charge.SMSAlertFee, Narrative: "SMS_ALERT_FEE"}); err != nil {
			t.Fatal(err)
		}
	}
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	env := map[string]string{"IC_COREBANK_URL": bank.URL}
	dir := t.TempDir()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	from, to := today.Format(time.DateOnly), today.AddDate(0, 0, 1).Format(time.DateOnly)

	read := func(file, account string) []string {
		t.Helper()
		var got []string
		if _, err := statement.ReadFile(file, statement.Options{CollectionAccount: account}, func(p statement.Posting) error {
			s := p.BankKey + " " + p.Amount.String()
			if p.Reversal {
				s += " reversal"
			}
			got = append(got, s)
			return nil
		}); err != nil {
			t.Fatalf("read %s: %v", file, err)
		}
		return got
	}
	export := func(name string, extra ...string) string {
		t.Helper()
		file := filepath.Join(dir, name)
		args := append([]string{"corebank", "statement", "--from", from, "--to", to, "--out", file}, extra...)
		if r := runCmd(ctx, env, args...); r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", file, fi, err)
		}
		return file
	}
	want := func(got []string, w ...string) {
		t.Helper()
		if strings.Join(got, "|") != strings.Join(w, "|") {
			t.Fatalf("postings %q, want %q", got, w)
		}
	}

	for _, tc := range []struct{ name, account, readAs string }{
		{"s0.xml", "", "FEES-COLLECTION"},
		{"s0-iban.xml", "GB82WEST12345698765432", "GB82 WEST 1234 5698 7654 32"},
	} {
		var extra []string
		if tc.account != "" {
			extra = []string{"--collection-account", tc.account}
		}
		want(read(export(tc.name, extra...), tc.readAs), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-3 INR 25.00")
	}

	if r := runCmd(ctx, env, "corebank", "reverse", "CHG-S-2"); r.code != 0 || !strings.Contains(r.stdout, "CHG-S-2: reversed") {
		t.Fatalf("reverse: %d %q %s", r.code, r.stdout, r.stderr)
	}
	want(read(export("s1.xml"), "FEES-COLLECTION"), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-3 INR 25.00", "CHG-S-2 INR 25.00 reversal")
	want(read(export("s1.csv", "--format", "csv"), ""), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-3 INR 25.00", "CHG-S-2 INR 25.00 reversal")

	if r := runCmd(ctx, env, "corebank", "drop", "CHG-S-3"); r.code != 0 {
		t.Fatalf("drop: %d %s", r.code, r.stderr)
	}
	want(read(export("s2.xml"), "FEES-COLLECTION"), "CHG-S-1 INR 25.00", "CHG-S-2 INR 25.00", "CHG-S-2 INR 25.00 reversal")
	// The ledger still counts every posting once.
	for k, n := range ledger.PostingsByKey() {
		if n != 1 {
			t.Fatalf("%s posted %d times", k, n)
		}
	}

	// To stdout, and the failures.
	if r := runCmd(ctx, env, "corebank", "statement", "--from", from, "--to", to); r.code != 0 || !strings.Contains(r.stdout, "<EndToEndId>CHG-S-1</EndToEndId>") {
		t.Fatalf("statement to stdout: %d %s", r.code, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"corebank", "reverse", "CHG-NONE"}, "404"},
		{[]string{"corebank", "drop", "CHG-NONE"}, "404"},
		{[]string{"corebank", "reverse"}, "exactly one bank key"},
		{[]string{"corebank", "statement", "--from", from}, "--from and --to are required"},
		{[]string{"corebank", "statement", "--from", to, "--to", from}, "--from must be before --to"},
		{[]string{"corebank", "statement", "--from", "someday", "--to", to}, "--from"},
		{[]string{"corebank", "statement", "--from", from, "--to", to, "--format", "pdf"}, "--format"},
	} {
		if r := runCmd(ctx, env, tc.args...); r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: %d %q, want a failure naming %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := runCmd(ctx, map[string]string{}, "corebank", "statement", "--from", from, "--to", to); r.code == 0 || !strings.Contains(r.stderr, "--corebank-url") {
		t.Errorf("no URL: %d %s", r.code, r.stderr)
	}
}

// holdWriteLock is a child process's job (IC_TEST_HOLD_WRITE_LOCK=path|30s):
// take the SQLite file's write lock, say so on stdout, hold it, let go.
func holdWriteLock(spec string) int {
	path, d, _ := strings.Cut(spec, "|")
	hold, err := time.ParseDuration(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := conn.ExecContext(context.Background(), "begin immediate"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	time.Sleep(hold)
	// Say so just before letting go: the outage ends no earlier than this.
	fmt.Println("released")
	_, _ = conn.ExecContext(context.Background(), "commit")
	return 0
}

// storeOutageScenario: two consumers drain the queue while the store is
// down for 30 s (outage starts it, and returns when it is over). They
// must keep running, post no debit without a claim, finish every
// charge exactly once afterwards, and dead-letter nothing; no message's
// receive count may grow by more than one during the outage.
//
// A 30-minute outage at production settings, compressed: the queue's
// redrive limit is 4 and a retried message returns after 1, 2, 4 s, so
// without the store gate a message would be dead-lettered ~7 s into the
// outage; the 30 s outage is four times that budget, as 30 minutes is
// about four times the default budget (10 receives, ~8 minutes).
// childEnv holds what only the consumer process sees (a proxy's address).
//
// outage returns when the store was down from and until, as precisely as
// it can tell (the receive-count check reads decisions between them).
func storeOutageScenario(t *testing.T, env, childEnv map[string]string, outage func() (from, to time.Time)) {
	const n = 300
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 40 * time.Millisecond})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(bank.Close)
	for k, v := range map[string]string{"IC_COREBANK_URL": bank.URL, "IC_COREBANK_ENQUIRY": "true", "IC_POLL_WAIT": "1s",
		"IC_VISIBILITY": "6s", "IC_LEASE": "6s", "IC_CONCURRENCY": "4", "IC_HTTP_ADDR": "127.0.0.1:0",
		"IC_LOG_LEVEL": "info", "IC_LOG_FORMAT": "json", "IC_MAX_RECEIVE": "4",
		"IC_CIRCUIT_PROBE": "500ms", "IC_CIRCUIT_PROBE_MAX": "4s", "IC_STORE_CIRCUIT_FAILURES": "3"} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	bc := backendFor(env)
	bc.MaxReceive = 4
	ctx := t.Context()
	b, err := backend.Open(ctx, *bc, 6*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	run := backend.RandomID()
	var bodies [][]byte
	ids := make([]string, n)
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-SO-%s-%03d", run, i), AccountID: "001234567890",
			Amount: charge.Money{Minor: 100 + int64(i), Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		ids[i] = c.ID
		body, _ := charge.MarshalEvent(c)
		bodies = append(bodies, body)
	}
	msgs := make([]queue.Outgoing, len(bodies))
	for i, body := range bodies {
		msgs[i] = queue.Outgoing{Body: body}
	}
	if _, err := b.Queue.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logs := []string{filepath.Join(dir, "serve-1.log"), filepath.Join(dir, "serve-2.log")}
	cenv := maps.Clone(env)
	maps.Copy(cenv, childEnv)
	var procs []*exec.Cmd
	for _, l := range logs { // two consumers on one queue, as in production
		procs = append(procs, childLogged(t, cenv, l, "serve"))
	}
	for len(ledger.Entries()) < 20 { // the drain is under way
		time.Sleep(20 * time.Millisecond)
	}
	start, end := outage()
	during := len(ledger.Entries())
	for _, p := range procs {
		if p.ProcessState != nil {
			t.Fatal("a consumer exited during the store outage")
		}
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		d, err := b.Queue.Depth(ctx)
		main := d.Waiting + d.InFlight
		if err == nil && main == 0 && len(ledger.Entries()) == n {
			break
		}
		if time.Now().After(deadline) {
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				lines := strings.Split(string(b), "\n")
				t.Logf("%s, last lines:\n%s", filepath.Base(l), strings.Join(lines[max(len(lines)-40, 0):], "\n"))
			}
			t.Fatalf("not finished after the outage: %d messages left, %d posted", main, len(ledger.Entries()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopAll(t, procs...)
	posted := ledger.PostingsByKey()
	for _, id := range ids {
		rec, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || rec.State != driver.StateDone || posted[id] != 1 {
			t.Errorf("%s: record %+v (%v), posted %d; want DONE and posted once", id, rec.State, err, posted[id])
		}
	}
	if len(posted) != n {
		t.Errorf("%d keys posted, want %d: a debit without a claim?", len(posted), n)
	}
	r := runCmd(ctx, env, "redrive", "--dry-run", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"seen":0`) {
		t.Errorf("the DLQ is not empty after a store outage: %s %s", r.stdout, r.stderr)
	}
	checkReceiveGrowth(t, readDecisions(t, logs...), logs, "store outage", start, end)
	t.Logf("%d of %d posted when the outage ended", during, n)
}

func TestStoreOutageOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "outage.db")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": db}
	storeOutageScenario(t, env, nil, func() (time.Time, time.Time) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		locker := exec.Command(exe)
		locker.Env = append(os.Environ(), "IC_TEST_HOLD_WRITE_LOCK="+db+"|30s")
		out, err := locker.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := locker.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		if !lines.Scan() || lines.Text() != "locked" {
			t.Fatalf("the lock holder did not take the lock: %q", lines.Text())
		}
		from := time.Now()
		if !lines.Scan() || lines.Text() != "released" {
			t.Fatalf("the lock holder did not say it let go: %q", lines.Text())
		}
		to := time.Now()
		if err := locker.Wait(); err != nil {
			t.Fatalf("lock holder: %v", err)
		}
		return from, to
	})
}

// faultProxy forwards to the emulator, failing every DynamoDB request with
// a 500 while down is set (SQS requests pass).
type faultProxy struct {
	proxy *httputil.ReverseProxy
	down  atomic.Bool
	hits  atomic.Int64
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() && strings.HasPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_") {
		p.hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected outage"}`)
		return
	}
	p.proxy.ServeHTTP(w, r)
}

func TestStoreOutageOnTheAWSEmulator(t *testing.T) {
	emulatorInParallel(t)
	target, err := url.Parse(os.Getenv(awstest.EndpointEnv))
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{proxy: httputil.NewSingleHostReverseProxy(target)}
	proxy := httptest.NewServer(fp)
	t.Cleanup(proxy.Close)
	env := awsSetup(t, "so", "--visibility", "6s", "--max-receive", "4")
	// the child's DynamoDB calls go through the proxy
	storeOutageScenario(t, env, map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": proxy.URL}, func() (from, to time.Time) {
		fp.down.Store(true)
		from = time.Now()
		time.Sleep(30 * time.Second)
		to = time.Now()
		fp.down.Store(false)
		if fp.hits.Load() == 0 {
			t.Fatal("no DynamoDB request reached the proxy during the outage")
		}
		return from, to
	})
}

// The Redis store behind a proxy that drops every connection and refuses
// new ones for 30 s, while the embedded queue keeps delivering.
func TestStoreOutageOfTheRedisStore(t *testing.T) {
	t.Parallel()
	env := redisEnv(t, filepath.Join(t.TempDir(), "outage.db"))
	u, err := url.Parse(env["IC_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	u.Host = p.addr()
	storeOutageScenario(t, env, map[string]string{"IC_REDIS_URL": u.String()}, func() (time.Time, time.Time) { return p.cut(30 * time.Second) })
}

// PostgreSQL behind the same proxy: the queue and the records go down
// together.
func TestStoreOutageOnPostgreSQL(t *testing.T) {
	t.Parallel()
	env := pgEnv(t)
	u, err := url.Parse(env["IC_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	u.Host = p.addr()
	storeOutageScenario(t, env, map[string]string{"IC_POSTGRES_URL": u.String()}, func() (time.Time, time.Time) { return p.cut(30 * time.Second) })
}

// tcpProxy forwards connections to a server; cut drops every connection
// and refuses new ones for a while.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	down   bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.dropAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			if down {
				c.Close()
				continue
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
}

func (p *tcpProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) cut(d time.Duration) (from, to time.Time) {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.dropAll()
	from = time.Now()
	time.Sleep(d)
	to = time.Now()
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	return from, to
}

// Three serve processes share one PostgreSQL database while one of them is
// SIGKILLed and replaced every second for 20 s: every charge is posted
// once and recorded DONE, and nothing reaches the DLQ.
func TestThreePostgresConsumersWithOneKilledEverySecond(t *testing.T) {
	t.Parallel()
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 150 * time.Millisecond})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	schema := dbtest.Schema(t)
	env := map[string]string{
		"IC_BACKEND": "postgres", "IC_POSTGRES_URL": dbtest.PostgresURL(), "IC_POSTGRES_SCHEMA": schema,
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_CONCURRENCY": "2",
		"IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_SKEW_MARGIN": "500ms", "IC_MAX_RECEIVE": "100",
		"IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn",
	}
	ctx := t.Context()
	var bc backend.Config
	bc.FreshDefaults()
	bc.Kind, bc.PostgresURL, bc.PostgresSchema, bc.Queue, bc.MaxReceive = backend.Postgres, dbtest.PostgresURL(), schema, "charge-due-events", 100
	b, err := backend.Open(ctx, bc, 3*time.Second, false)
	if err != nil {
		pgtest.Open(t) // fails in CI, skips elsewhere, saying how to start PostgreSQL
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	const n = 500
	var msgs []queue.Outgoing
	var ids []string
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-PG-%03d", i), AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
		msgs = append(msgs, queue.Outgoing{Body: body})
		if i%5 < 2 { // 40% resent
			msgs = append(msgs, queue.Outgoing{Body: body})
		}
	}
	if _, err := b.Queue.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	procs := []*exec.Cmd{child(t, env, "serve"), child(t, env, "serve"), child(t, env, "serve")}
	kills, midWork := 0, 0
	for i := range 20 {
		time.Sleep(time.Second)
		victim := i % 3
		if len(ledger.PostingsByKey()) < n {
			midWork++
		}
		_ = procs[victim].Process.Kill()
		_ = procs[victim].Wait()
		kills++
		procs[victim] = child(t, env, "serve")
	}
	if midWork < 10 {
		t.Fatalf("only %d of %d kills came while charges were still unposted: the test proves little", midWork, kills)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		d, err := b.Queue.Depth(ctx)
		if err == nil && d.Waiting+d.InFlight == 0 && len(ledger.PostingsByKey()) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: depth %+v, %d of %d posted", d, len(ledger.PostingsByKey()), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopAll(t, procs...)
	for k, c := range ledger.PostingsByKey() {
		if c != 1 {
			t.Errorf("%s posted %d times", k, c)
		}
	}
	for _, id := range ids {
		r, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || r.State != driver.StateDone {
			t.Fatalf("record %s: %+v %v, want DONE", id, r, err)
		}
	}
	if d, err := b.Queue.Depth(ctx); err != nil || d.DLQ != 0 {
		t.Fatalf("DLQ holds %d (%v), want none", d.DLQ, err)
	}
	t.Logf("%d kills (%d while charges were unposted); %d debit requests after a confirmed posting (crashes between the debit and DONE, absorbed by the key)",
		kills, midWork, len(ledger.DuplicateRequests()))
}

// A PostgreSQL pool too small for the receivers serve runs is refused at
// start, saying what to set; without pool_max_conns serve sizes the pool
// for its receivers itself.
func TestServeRefusesAPostgresPoolTooSmallForItsReceivers(t *testing.T) {
	t.Parallel()
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is not there
	for _, tc := range []struct {
		url       string
		receivers string
		refused   bool
	}{
		{dbtest.PostgresURL() + "&pool_max_conns=4", "", true},   // 4 receivers by default where claims ride in the queue
		{dbtest.PostgresURL() + "&pool_max_conns=5", "3", false}, // 3 + 2
		{dbtest.PostgresURL() + "&pool_max_conns=8", "8", true},
		{dbtest.PostgresURL(), "16", false},
	} {
		env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": tc.url, "IC_POSTGRES_SCHEMA": dbtest.Schema(t),
			"IC_COREBANK_URL": "http://127.0.0.1:1", "IC_RECEIVERS": tc.receivers}
		r := runCmd(t.Context(), env, "serve")
		if tc.refused {
			if r.code != exitUsage || !strings.Contains(r.stderr, "too small for") || !strings.Contains(r.stderr, "set pool_max_conns to at least") {
				t.Errorf("receivers %q with %s: exit %d, %s; want 2 saying the pool is too small", tc.receivers, tc.url, r.code, r.stderr)
			}
			continue
		}
		// Past the pool check: it stops at the schema setup has not made.
		if r.code != exitFailed || !strings.Contains(r.stderr, "run chargerecovery setup") {
			t.Errorf("receivers %q with %s: exit %d, %s; want the pool accepted (and the missing schema named)", tc.receivers, tc.url, r.code, r.stderr)
		}
	}
}
