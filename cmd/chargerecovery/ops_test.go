package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/bench"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// startCmd runs a command in the background; its stderr can be read while
// it runs.
func startCmd(ctx context.Context, env map[string]string, args ...string) (*logbuf.Buffer, <-chan int) {
	env = withSimNotifier(env)
	var out, errb logbuf.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, args) }()
	return &errb, done
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metricValue reads one sample from a Prometheus text exposition.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no sample %s in /metrics", series)
	return 0
}

func opsScenario(t *testing.T, env map[string]string) {
	ctx := t.Context()
	ledger := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{"005555555555": "INSUFFICIENT_FUNDS"}})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	env["IC_COREBANK_URL"] = bank.URL
	env["IC_HTTP_ADDR"] = "127.0.0.1:0"
	env["IC_LOG_FORMAT"] = "text"
	env["IC_POLL_WAIT"] = "1s"
	env["IC_DEPTH_INTERVAL"] = "1s"

	send := func(args ...string) {
		t.Helper()
		if r := runCmd(ctx, env, append([]string{"send"}, args...)...); r.code != 0 {
			t.Fatalf("send %v: %s", args, r.stderr)
		}
	}
	send("--charge-id", "CHG-OPS-GOOD", "--account", "001234567890", "--amount-minor", "2500", "--due", "2026-11-30", "--copies", "2")
	send("--charge-id", "CHG-OPS-NSF", "--account", "005555555555", "--amount-minor", "15000", "--type", "CHEQUE_BOOK_FEE")
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"chargeId":"CHG-OPS-BAD","amount":{"minor":"25"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	send("--body-file", bad)

	ctxServe, stop := context.WithCancel(ctx)
	defer stop()
	logs, done := startCmd(ctxServe, env, "serve", "--visibility", "3s", "--lease", "3s")
	addrRe := regexp.MustCompile(`serving /metrics[^\n]*addr=(127\.0\.0\.1:\d+)`)
	var base string
	deadline := time.Now().Add(30 * time.Second)
	for base == "" && time.Now().Before(deadline) {
		if m := addrRe.FindStringSubmatch(logs.String()); m != nil {
			base = "http://" + m[1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	if base == "" {
		t.Fatalf("serve did not start its HTTP endpoint: %s", logs.String())
	}
	for len(ledger.Entries()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// The same charge id with another amount: a conflict.
	send("--charge-id", "CHG-OPS-GOOD", "--account", "001234567890", "--amount-minor", "999999", "--due", "2026-11-30")
	var metrics string
	for time.Now().Before(deadline) {
		_, metrics = httpGet(t, base+"/metrics")
		if strings.Contains(metrics, `chargerecovery_dlq_forwards_total{reason="conflict"} 1`) &&
			strings.Contains(metrics, `chargerecovery_dlq_forwards_total{reason="invalid"} 1`) &&
			strings.Contains(metrics, `chargerecovery_dlq_forwards_total{reason="debit_failed"} 1`) &&
			strings.Contains(metrics, `chargerecovery_queue_messages{state="dlq"} 3`) &&
			metricValue(t, metrics, `chargerecovery_claim_outcomes_total{outcome="duplicate_done"}`)+
				metricValue(t, metrics, `chargerecovery_claim_outcomes_total{outcome="duplicate_in_progress"}`) >= 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkQueriedMetricsExported(t, env["IC_BACKEND"], metrics) // the dashboard's and the alerts' names, on every backend
	for series, want := range map[string]float64{
		`chargerecovery_claim_outcomes_total{outcome="acquired"}`:         2,
		`chargerecovery_claim_outcomes_total{outcome="conflict"}`:         1,
		`chargerecovery_debits_total{result="success"}`:                   1,
		`chargerecovery_debits_total{result="declined"}`:                  1,
		`chargerecovery_notifications_total{channel="sim",result="sent"}`: 1,
		`chargerecovery_dlq_forwards_total{reason="invalid"}`:             1,
		`chargerecovery_dlq_forwards_total{reason="conflict"}`:            1,
		`chargerecovery_queue_messages{state="dlq"}`:                      3, // sampled in the background
		`chargerecovery_queue_messages{state="waiting"}`:                  0,
	} {
		if got := metricValue(t, metrics, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if metricValue(t, metrics, "chargerecovery_messages_received_total") < 5 ||
		metricValue(t, metrics, "chargerecovery_processing_seconds_count") < 5 {
		t.Errorf("received/processing counters too low:\n%s", metrics)
	}
	if code, body := httpGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q", code, body)
	}
	// status, while the consumer runs: one view of everything.
	r := runCmd(ctx, env, "status", "--json", "--metrics-url", base+"/metrics")
	var st status.Report
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil {
		t.Fatalf("status: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stdout, `"oldestAge"`); n > 1 || (n == 0) != (bcKind(env) == "aws") {
		t.Errorf("status --json says oldestAge %d times: %s", n, r.stdout)
	}
	if st.Queue.DLQ != 3 || (st.Queue.OldestAge == nil) != (bcKind(env) == "aws") || st.DLQByCode["invalid"] != 1 || st.DLQByCode["conflict"] != 1 ||
		st.DLQByCode["debit_failed"] != 1 || !st.Consumer.Reachable || st.Consumer.Circuit != "closed" {
		t.Errorf("status = %+v", st)
	}
	_, doneCounted := st.Records[driver.StateDone]
	switch {
	case bcKind(env) == "aws":
		// DynamoDB counts by its sparse index (a Query): IN_PROGRESS and
		// FAILED, not DONE (a scan of the table).
		if doneCounted || st.Records[driver.StateFailed] != 1 || !strings.Contains(st.RecordsNote, "DONE not counted") {
			t.Errorf("status records on DynamoDB = %v (%s), want FAILED 1 and DONE not counted", st.Records, st.RecordsNote)
		}
	case st.Records != nil && (st.Records[driver.StateDone] != 1 || st.Records[driver.StateFailed] != 1):
		t.Errorf("status records = %v, want 1 DONE and 1 FAILED", st.Records)
	}
	if r := runCmd(ctx, env, "status", "--metrics-url", base+"/metrics"); r.code != 0 || !strings.Contains(r.stdout, "circuit closed") ||
		!strings.Contains(r.stdout, "dlq       3 (conflict 1, debit_failed 1, invalid 1)") {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d: %s", code, logs.String())
	}
	if l := logs.String(); strings.Contains(l, "001234567890") || !strings.Contains(l, "audit=true") || !strings.Contains(l, "alert=true") {
		t.Errorf("logs must mask accounts, audit duplicates and alert on conflicts:\n%s", l)
	}

	// inspect
	r = runCmd(ctx, env, "inspect", "CHG-OPS-GOOD")
	if r.code != 0 || !strings.Contains(r.stdout, "DONE (finished") || !strings.Contains(r.stdout, "DEBITED") {
		t.Fatalf("inspect: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCmd(ctx, env, "inspect", "--json", "CHG-OPS-NSF")
	var rec status.RecordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.State != "FAILED" || rec.Status != "FAILED" || !strings.Contains(rec.Detail, "INSUFFICIENT_FUNDS") {
		t.Fatalf("inspect --json: %v %+v %s", err, rec, r.stderr)
	}
	if r := runCmd(ctx, env, "inspect", "CHG-NEVER"); r.code != exitFailed || !strings.Contains(r.stderr, "no idempotency record") {
		t.Fatalf("inspect of an unknown charge: %d %s", r.code, r.stderr)
	}

	// stuck: a worker claimed a charge an hour ago and died.
	b, err := backend.OpenExisting(ctx, backendFor(env))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := idempotency.NewGuard(b.Store, idempotency.Options{Lease: time.Minute, Clock: storetest.NewClock(time.Now().Add(-time.Hour))})
	dead := charge.Charge{ID: "CHG-OPS-STUCK", AccountID: "001234567890", Amount: charge.Money{Minor: 1, Currency: "INR"}, Type: charge.LockerRent}
	if _, err := g.Claim(ctx, dead.ID, dead.Fingerprint(nil)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	r = runCmd(ctx, env, "stuck")
	if r.code != 0 || !strings.Contains(r.stdout, "1 claim(s) IN_PROGRESS past their lease") || !strings.Contains(r.stdout, "CHG-OPS-STUCK") {
		t.Fatalf("stuck: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// dlq list: each entry once, the account masked, filters by reason and
	// by charge; an unknown reason is a usage error listing the codes.
	dlqList := func(args ...string) (int, []dlqEntry) {
		t.Helper()
		r := runCmd(ctx, env, append([]string{"dlq", "list", "--json"}, args...)...)
		var out struct {
			Total   int        `json:"total"`
			Entries []dlqEntry `json:"entries"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
			t.Fatalf("dlq list %v: %d %s %s", args, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "005555555555") || strings.Contains(r.stdout, "001234567890") {
			t.Errorf("dlq list shows a full account number:\n%s", r.stdout)
		}
		return out.Total, out.Entries
	}
	total, entries := dlqList()
	byCharge := map[string]dlqEntry{}
	for _, e := range entries {
		byCharge[e.ChargeID] = e
	}
	if nsf := byCharge["CHG-OPS-NSF"]; total != 3 || nsf.Code != "debit_failed" || nsf.Account != "********5555" || nsf.Amount == "" ||
		!strings.Contains(nsf.Detail, "INSUFFICIENT_FUNDS") || byCharge["CHG-OPS-BAD"].Code != "invalid" || byCharge["CHG-OPS-BAD"].Unreadable == "" ||
		byCharge["CHG-OPS-GOOD"].Code != "conflict" {
		t.Errorf("dlq list: %d entries %+v", total, entries)
	}
	if n, e := dlqList("--reason", "debit_failed"); n != 1 || e[0].ChargeID != "CHG-OPS-NSF" {
		t.Errorf("dlq list --reason debit_failed: %d %+v", n, e)
	}
	if n, e := dlqList("--charge-id", "CHG-OPS-GOOD"); n != 1 || e[0].Code != "conflict" {
		t.Errorf("dlq list --charge-id CHG-OPS-GOOD: %d %+v", n, e)
	}
	if n, _ := dlqList("--older-than", "1h"); n != 0 {
		t.Errorf("dlq list --older-than 1h: %d entries of a minute ago", n)
	}
	if r := runCmd(ctx, env, "dlq", "list"); r.code != 0 || !strings.Contains(r.stdout, "3 DLQ entries") || !strings.Contains(r.stdout, "********5555") {
		t.Errorf("dlq list: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"dlq", "list", "--reason", "bogus"}, {"redrive", "--reason", "bogus"}} {
		if r := runCmd(ctx, env, args...); r.code != exitUsage || !strings.Contains(r.stderr, "the codes are conflict, debit_failed, duplicate_failed, invalid, max_receives, too_large") {
			t.Errorf("%v: exit %d, %s; want 2 listing the codes", args, r.code, r.stderr)
		}
	}
	r = runCmd(ctx, env, "dlq", "show", "CHG-OPS-NSF")
	if r.code != 0 || !strings.Contains(r.stdout, `"accountId":"********5555"`) || strings.Contains(r.stdout, "005555555555") ||
		!strings.Contains(r.stdout, "record:") || !strings.Contains(r.stdout, "FAILED") || !strings.Contains(r.stdout, "debit_failed") {
		t.Errorf("dlq show CHG-OPS-NSF: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "dlq", "show", "CHG-NOT-THERE"); r.code != exitFailed || !strings.Contains(r.stderr, "no DLQ entry") {
		t.Errorf("dlq show of an absent charge: %d %s", r.code, r.stderr)
	}

	// redrive: dry run, by reason, by charge, conflicts held back, then forced.
	redrive := func(args ...string) map[string]any {
		t.Helper()
		r := runCmd(ctx, env, append([]string{"redrive", "--json"}, args...)...)
		var rep map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
			t.Fatalf("redrive %v: %d %s %s", args, r.code, r.stdout, r.stderr)
		}
		return rep
	}
	want := func(rep map[string]any, key string, n float64) {
		t.Helper()
		if rep[key] != n {
			t.Fatalf("redrive report %v: %s != %v", rep, key, n)
		}
	}
	rep := redrive("--dry-run")
	want(rep, "seen", 3)
	want(rep, "moved", 2)
	want(rep, "held_back", 1)
	rep = redrive("--reason", "invalid")
	want(rep, "moved", 1)
	rep = redrive("--charge-id", "CHG-OPS-NSF")
	want(rep, "moved", 1) // debit_failed
	want(rep, "held_back", 0)
	rep = redrive()
	want(rep, "moved", 0) // the conflict stays
	want(rep, "held_back", 1)
	rep = redrive("--force", "--reason", "conflict")
	want(rep, "moved", 1)
	rep = redrive("--dry-run")
	want(rep, "seen", 0)
}

func backendFor(env map[string]string) *backend.Config {
	bc := &backend.Config{Kind: env["IC_BACKEND"], DB: env["IC_DB"], Sync: "FULL", Queue: env["IC_QUEUE"], DLQ: env["IC_DLQ"],
		Table: env["IC_TABLE"], Wait: time.Second, MaxReceive: 10,
		QueueRetention: sqlite.DefaultRetention, DLQRetention: sqlite.DefaultDLQRetention,
		PostgresURL: env["IC_POSTGRES_URL"], PostgresSchema: env["IC_POSTGRES_SCHEMA"],
		Store: env["IC_STORE"], RedisURL: env["IC_REDIS_URL"], RedisPrefix: env["IC_REDIS_PREFIX"]}
	if bc.Queue == "" {
		bc.Queue = "charge-due-events"
	}
	return bc
}

func TestOperatorToolsOnTheEmbeddedBackend(t *testing.T) {
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "ops.db")}
	mustSetup(t, env) // send never creates the file
	opsScenario(t, env)
}

// pgEnv points the commands at a PostgreSQL schema of the test's own,
// made by setup (as in production: serve and the operator commands do not
// create it).
func pgEnv(t *testing.T) map[string]string {
	t.Helper()
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is not there
	env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": dbtest.PostgresURL(), "IC_POSTGRES_SCHEMA": dbtest.Schema(t)}
	mustSetup(t, env)
	return env
}

// redisEnv uses the embedded queue with the Redis store under a key
// prefix of the test's own.
func redisEnv(t *testing.T, db string) map[string]string {
	t.Helper()
	_, prefix := dbtest.Redis(t)
	return map[string]string{"IC_BACKEND": "embedded", "IC_DB": db, "IC_STORE": "redis", "IC_REDIS_URL": dbtest.RedisURL(), "IC_REDIS_PREFIX": prefix}
}

func TestOperatorToolsOnPostgreSQL(t *testing.T) {
	opsScenario(t, pgEnv(t))
}

func TestOperatorToolsOnAWS(t *testing.T) {
	useEmulator(t)
	opsScenario(t, awsSetup(t, "ops", "--visibility", "3s"))
}

func bcKind(env map[string]string) string { return env["IC_BACKEND"] }

// TestIDsThatMatchNothingExit1: redrive, renotify and reopen of a charge
// id that matches nothing say which and exit 1 (redrive used to say
// "moved 0" and exit 0).
func TestIDsThatMatchNothingExit1(t *testing.T) {
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "nope.db"), "IC_OPERATOR": "ops-1", "IC_NOTIFY": "log"}
	mustSetup(t, env)
	for _, args := range [][]string{
		{"redrive", "--charge-id", "CHG-NOPE,CHG-NOPE2"},
		{"redrive", "--dry-run", "--charge-id", "CHG-NOPE,CHG-NOPE2"},
		{"renotify", "CHG-NOPE", "CHG-NOPE2"},
		{"reopen", "CHG-NOPE", "--reason", "x"},
	} {
		r := runCmd(t.Context(), env, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "CHG-NOPE") {
			t.Errorf("%v: exit %d, %s%s", args, r.code, r.stdout, r.stderr)
		}
		if args[0] != "reopen" && !strings.Contains(r.stderr, "CHG-NOPE2") {
			t.Errorf("%v does not name every id: %s", args, r.stderr)
		}
	}
}

func TestPurgeAndTheServeSweeperDeleteOnlyWhatIsPastRetention(t *testing.T) {
	db := filepath.Join(t.TempDir(), "purge.db")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": db}
	ctx := t.Context()
	b, err := backend.Open(ctx, *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := bench.SeedExpired(ctx, b.Store, 7); err != nil {
		t.Fatal(err)
	}
	live, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := live.Claim(ctx, "CHG-LIVE", "fp"); err != nil || !c.Outcome.Owned() {
		t.Fatal(c.Outcome, err)
	}
	purge := func(args ...string) backend.SweepCounts {
		t.Helper()
		r := runCmd(ctx, env, append([]string{"purge", "--json"}, args...)...)
		var got struct {
			backend.SweepCounts
			DryRun bool `json:"dry_run"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
			t.Fatalf("purge %v: %d %s %s", args, r.code, r.stdout, r.stderr)
		}
		return got.SweepCounts
	}
	if got := purge("--dry-run"); got.Records != 7 {
		t.Fatalf("dry run: %+v, want 7 records", got)
	}
	if got := purge("--sweep-batch", "3", "--sweep-pause", "0s"); got.Records != 7 {
		t.Fatalf("purge: %+v, want 7 records deleted in batches of 3", got)
	}
	if got := purge("--dry-run"); got.Records != 0 {
		t.Fatalf("after purge: %+v", got)
	}
	if _, err := live.Get(ctx, "CHG-LIVE"); err != nil {
		t.Fatalf("purge deleted a live record: %v", err)
	}

	// serve sweeps by itself, and counts it.
	if err := bench.SeedExpired(ctx, b.Store, 5); err != nil {
		t.Fatal(err)
	}
	if got := purge("--dry-run"); got.Records != 5 {
		t.Fatalf("seeded again: %+v, want 5 records to purge", got)
	}
	bank := httptest.NewServer(corebanksim.Handler(corebanksim.NewLedger(corebanksim.Faults{})))
	defer bank.Close()
	ops := freeAddr(t)
	for k, v := range map[string]string{"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_SWEEP_INTERVAL": "200ms", "IC_HTTP_ADDR": ops} {
		env[k] = v
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() { done <- runCmd(sctx, env, "serve") }()
	// Stop serve once it has counted the sweep (its log line follows the
	// count): stopping it as soon as the records were gone raced the line.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, body := getBody("http://" + ops + "/metrics"); strings.Contains(body, "chargerecovery_records_purged_total 5") {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("serve did not sweep: %s", (<-done).stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := purge("--dry-run"); got.Records != 0 {
		t.Fatalf("after serve's sweep: %+v", got)
	}
	stop()
	r := <-done
	if r.code != 0 || !strings.Contains(r.stderr, `"records_purged":5`) {
		t.Fatalf("serve: %d %s", r.code, r.stderr)
	}
}

func TestServeRefusesARecordRetentionShorterThanTheQueues(t *testing.T) {
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "r.db"), "IC_COREBANK_URL": "http://127.0.0.1:1", "IC_HTTP_ADDR": "127.0.0.1:0"}
	r := runCmd(t.Context(), env, "serve", "--retention", "400h") // < 96h + 336h
	if r.code != 2 || !strings.Contains(r.stderr, "shorter than the queue's message retention 96h0m0s plus the DLQ's 336h0m0s") ||
		!strings.Contains(r.stderr, "at least 432h0m0s") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if r := runCmd(ctx, env, "serve", "--retention", "100h", "--queue-retention", "24h", "--dlq-retention", "72h", "--shutdown-timeout", "1s"); r.code != 0 {
		t.Fatalf("a retention covering both queues was refused: %s", r.stderr)
	}
}

func TestServeOnAWSReadsTheQueuesRetention(t *testing.T) {
	emulatorInParallel(t)
	env := awsSetup(t, "ret")
	env["IC_COREBANK_URL"], env["IC_HTTP_ADDR"] = "http://127.0.0.1:1", ""
	r := runCmd(t.Context(), env, "serve", "--retention", "300h") // setup: 4 days + 14 days = 432h
	if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("at least %s", 432*time.Hour)) {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}
