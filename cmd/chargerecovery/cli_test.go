package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/jackc/pgx/v5"
)

// The read-only commands, as an operator types them at month-end.
var readOnly = [][]string{
	{"status"}, {"inspect", "CHG-1"}, {"stuck"}, {"dlq", "list"}, {"dlq", "show", "CHG-1"},
	{"redrive", "--dry-run"}, {"purge", "--dry-run"},
}

// A mistyped --db or --postgres-schema is an error that says to run
// setup, never a new empty file or schema that reads as "all clear".
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	typo := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range readOnly {
		r := runCmd(t.Context(), map[string]string{"IC_DB": typo}, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "run chargerecovery setup") || !strings.Contains(r.stderr, "typo.db") {
			t.Errorf("%v on a missing file: exit %d, %s; want 1 naming it and saying run setup", args, r.code, r.stderr)
		}
		if _, err := os.Stat(typo); err == nil {
			t.Fatalf("%v created %s", args, typo)
		}
	}
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is not there
	schema := dbtest.Schema(t)
	env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": dbtest.PostgresURL(), "IC_POSTGRES_SCHEMA": schema, "IC_COREBANK_URL": "http://127.0.0.1:1"}
	for _, args := range append(readOnly[:len(readOnly)-1], []string{"serve"}) {
		r := runCmd(t.Context(), env, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "schema "+schema+" does not exist") || !strings.Contains(r.stderr, "run chargerecovery setup") {
			t.Errorf("%v on a missing schema: exit %d, %s", args, r.code, r.stderr)
		}
	}
	conn, err := pgx.Connect(t.Context(), dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(t.Context(), "select exists (select 1 from pg_namespace where nspname = $1)", schema).Scan(&exists); err != nil || exists {
		t.Errorf("schema %s exists after the read-only commands (%v)", schema, err)
	}
}

// The GRANTs docs/operations/postgres.md gives a PostgreSQL role are enough: setup runs
// as the owner, then a role with only USAGE on the schema and
// SELECT/INSERT/UPDATE/DELETE on its tables sends, serves, and runs every
// operator command.
func TestALeastPrivilegePostgresRoleRunsEverything(t *testing.T) {
	t.Parallel()
	owner := pgEnv(t) // setup, as the owner
	schema := owner["IC_POSTGRES_SCHEMA"]
	role := dbtest.Name("ic_app_")
	conn, err := pgx.Connect(t.Context(), dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	grants := leastPrivilegeGrants(schema, role)
	for _, stmt := range append([]string{"create role " + role + " login"}, grants...) {
		if _, err := conn.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dbtest.PostgresURL())
		if err == nil {
			_, _ = c.Exec(ctx, "drop owned by "+role)
			_, _ = c.Exec(ctx, "drop role "+role)
			c.Close(ctx)
		}
	})
	u, err := url.Parse(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	ledger := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{"005555555555": "INSUFFICIENT_FUNDS"}})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": u.String(), "IC_POSTGRES_SCHEMA": schema,
		"IC_COREBANK_URL": bank.URL, "IC_HTTP_ADDR": "127.0.0.1:0", "IC_POLL_WAIT": "1s"}
	for _, c := range [][]string{
		{"send", "--charge-id", "CHG-LP-1", "--account", "001234567890", "--amount-minor", "2500", "--copies", "2"},
		{"send", "--charge-id", "CHG-LP-2", "--account", "005555555555", "--amount-minor", "2500"},
	} {
		if r := runCmd(t.Context(), env, c...); r.code != 0 {
			t.Fatalf("%v as %s: %d %s", c, role, r.code, r.stderr)
		}
	}
	serveUntil(t, env, nil, func() bool {
		return len(ledger.Entries()) == 1 && runCmd(t.Context(), env, "dlq", "list").code == 0 &&
			strings.Contains(runCmd(t.Context(), env, "dlq", "list").stdout, "1 DLQ entry")
	})
	for _, c := range [][]string{
		{"status"}, {"inspect", "CHG-LP-1"}, {"stuck"}, {"dlq", "list"}, {"dlq", "show", "CHG-LP-2"},
		{"redrive", "--dry-run"}, {"renotify", "--all", "--dry-run"},
		{"reopen", "CHG-LP-2", "--reason", "funds arrived", "--new-attempt", "--operator", "ops-1"},
		{"redrive", "--charge-id", "CHG-LP-2", "--operator", "ops-1"},
	} {
		if r := runCmd(t.Context(), env, c...); r.code != 0 {
			t.Errorf("%v as %s: exit %d %s", c, role, r.code, r.stderr)
		}
	}
	if posted := ledger.PostingsByKey(); posted["CHG-LP-1"] != 1 {
		t.Errorf("CHG-LP-1 posted %d times", posted["CHG-LP-1"])
	}
}

// leastPrivilegeGrants are the statements docs/operations/postgres.md gives (the test
// checks the document holds them too).
func leastPrivilegeGrants(schema, role string) []string {
	return []string{
		fmt.Sprintf("grant usage on schema %s to %s", schema, role),
		fmt.Sprintf("grant select, insert, update, delete on all tables in schema %s to %s", schema, role),
	}
}

func TestOperationsGivesTheLeastPrivilegeGrants(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations/postgres.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range leastPrivilegeGrants("chargerecovery", "chargerecovery_app") {
		if !strings.Contains(string(doc), g+";") {
			t.Errorf("docs/operations/postgres.md does not give %q", g)
		}
	}
}

// -h prints the usage once; a bad flag prints one line naming it and
// where the usage is; a command that acts names its operator, and asks for
// one where the process has no OS user (a container).
func TestTheCommandLineSpeaksOnce(t *testing.T) {
	t.Parallel()
	r := runCmd(t.Context(), nil, "status", "-h")
	if r.code != 0 || strings.Count(r.stderr, "usage: chargerecovery status") != 1 {
		t.Errorf("status -h: exit %d, usage printed %d times", r.code, strings.Count(r.stderr, "usage: chargerecovery status"))
	}
	r = runCmd(t.Context(), nil, "serve", "--bogus")
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != exitUsage || len(lines) != 1 ||
		!strings.Contains(r.stderr, "-bogus") || !strings.Contains(r.stderr, "see chargerecovery serve -h") {
		t.Errorf("serve --bogus: exit %d, %d lines:\n%s", r.code, len(lines), r.stderr)
	}
	db := filepath.Join(t.TempDir(), "op.db")
	if r := runCmd(t.Context(), map[string]string{"IC_DB": db}, "setup"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	noUser := map[string]string{"IC_DB": db, "USER": "", "LOGNAME": ""}
	for _, c := range [][]string{{"reopen", "CHG-1", "--reason", "x"}, {"redrive"}, {"renotify", "--all", "--notify", "log"}} {
		if r := runCmd(t.Context(), noUser, c...); r.code != exitUsage || !strings.Contains(r.stderr, "--operator NAME (IC_OPERATOR)") {
			t.Errorf("%v without a user: exit %d %s; want 2 asking for --operator", c, r.code, r.stderr)
		}
	}
	withOp := map[string]string{"IC_DB": db, "USER": "", "IC_OPERATOR": "jane.doe"}
	if r := runCmd(t.Context(), withOp, "redrive"); r.code != 0 {
		t.Errorf("redrive with IC_OPERATOR: %d %s", r.code, r.stderr)
	}
}

// A dead-letter forward repeated after its answer was lost (SQS: the send
// to the DLQ, then a delete whose answer did not come back) leaves two
// copies of one message: dlq list shows one entry with copies 2.
func TestDLQListShowsARepeatedForwardOnce(t *testing.T) {
	useEmulator(t)
	env := awsSetup(t, "dlqrep", "--visibility", "30s")
	if r := runCmd(t.Context(), env, "send", "--charge-id", "CHG-REP-1", "--account", "001234567890", "--amount-minor", "100"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	b, err := backend.OpenExisting(t.Context(), backendFor(env))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var msgs []queue.Message
	for deadline := time.Now().Add(20 * time.Second); len(msgs) == 0 && time.Now().Before(deadline); {
		if msgs, err = b.Queue.Receive(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if len(msgs) != 1 {
		t.Fatal("no message received")
	}
	reason := queue.Reason{Code: "debit_failed", Detail: "debit declined: INSUFFICIENT_FUNDS"}
	for range 2 { // the second as a retry after a lost answer
		if err := b.Queue.DeadLetter(t.Context(), msgs[0], reason); err != nil {
			t.Fatal(err)
		}
	}
	r := runCmd(t.Context(), env, "dlq", "list", "--json")
	var listed struct {
		Total   int        `json:"total"`
		Entries []dlqEntry `json:"entries"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil {
		t.Fatalf("dlq list: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if listed.Total != 1 || listed.Entries[0].Copies != 2 || listed.Entries[0].ChargeID != "CHG-REP-1" {
		t.Errorf("dlq list = %+v, want one entry for CHG-REP-1 with 2 copies", listed)
	}
}

// A queue or a table that is not there is reported as missing, with the
// fix (setup, or the flag), on the emulator.
func TestAMissingQueueOrTableSaysSo(t *testing.T) {
	useEmulator(t)
	env := awsSetup(t, "missing")
	r := runCmd(t.Context(), map[string]string{"IC_BACKEND": "aws", "IC_QUEUE": "no-such-queue-" + env["IC_QUEUE"], "IC_DLQ": env["IC_DLQ"], "IC_TABLE": env["IC_TABLE"]}, "status")
	if r.code != exitFailed || !strings.Contains(r.stderr, "does not exist: create it (chargerecovery setup --backend aws) or set --queue") {
		t.Errorf("status on a missing queue: exit %d %s", r.code, r.stderr)
	}
	noTable := map[string]string{"IC_BACKEND": "aws", "IC_QUEUE": env["IC_QUEUE"], "IC_DLQ": env["IC_DLQ"], "IC_TABLE": "no-such-table-" + env["IC_TABLE"],
		"IC_COREBANK_URL": "http://127.0.0.1:1", "IC_HTTP_ADDR": "127.0.0.1:0"}
	r = runCmd(t.Context(), noTable, "serve")
	if r.code != exitFailed || !strings.Contains(r.stderr, "does not exist: create it (chargerecovery setup --backend aws) or set --table") {
		t.Errorf("serve on a missing table: exit %d %s", r.code, r.stderr)
	}
}

// stuck on the Redis store says that store cannot list them, and how to
// see one instead.
func TestStuckOnTheRedisStoreNamesTheStore(t *testing.T) {
	t.Parallel()
	env := redisEnv(t, filepath.Join(t.TempDir(), "r.db"))
	mustSetup(t, env)
	r := runCmd(t.Context(), env, "stuck")
	if r.code != exitFailed || !strings.Contains(r.stderr, "the redis store cannot list stuck claims") {
		t.Errorf("stuck --store redis: exit %d %s", r.code, r.stderr)
	}
}

// The operator's stuck and status on a DynamoDB that validates requests as
// AWS does: the table on dynalite (AWS_ENDPOINT_URL_DYNAMODB), the queues
// on moto. A claim is in no index (the hot path writes none), so a claim
// whose worker died an hour ago is found by Stuck's Scan; the WAITING and
// FAILED records are counted by Queries of the index, the IN_PROGRESS ones
// by the Scan; a WAITING record long past its not-before is not stuck.
func TestStuckAndStatusOnDynalite(t *testing.T) {
	useEmulator(t)
	dcfg := awstest.DynaliteConfig(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", os.Getenv(awstest.DynaliteEnv))
	ctx := t.Context()
	name := awstest.Name("stuckdy")
	env := map[string]string{"IC_BACKEND": "aws", "IC_QUEUE": name, "IC_DLQ": name + "-dlq", "IC_TABLE": name}
	// setup's steps, the table's on dynalite (which has no TTL to switch on).
	if _, err := awssqs.CreateQueues(ctx, sqs.NewFromConfig(awstest.Config(t)), awssqs.QueueSpec{Name: name, DLQName: name + "-dlq",
		VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 10}); err != nil {
		t.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(dcfg)
	if err := awsdynamodb.CreateTable(ctx, ddb, name); err != nil && !awstest.TTLUnsupported(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), ddb, name) })

	b, err := backend.OpenExisting(ctx, backendFor(env))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Store.(*awsdynamodb.Store); !ok {
		t.Fatalf("the store is %T, want DynamoDB's", b.Store)
	}
	hourAgo := storetest.NewClock(time.Now().Add(-time.Hour))
	old, _ := idempotency.NewGuard(b.Store, idempotency.Options{Lease: time.Minute, Clock: hourAgo})
	if _, err := old.Claim(ctx, "CHG-DY-STUCK", "fp"); err != nil { // its worker died; its message went to the DLQ
		t.Fatal(err)
	}
	w, err := old.Claim(ctx, "CHG-DY-WAIT", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Finish(ctx, driver.FinishRequest{Key: "CHG-DY-WAIT", Token: w.Record.Token, State: driver.StateWaiting,
		Status: "RETRY_SCHEDULED", Now: hourAgo.Now(), ExpiresAt: time.Now().Add(24 * time.Hour), NotBefore: hourAgo.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	f, err := old.Claim(ctx, "CHG-DY-FAILED", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Fail(ctx, f.Lease(), "FAILED", "declined"); err != nil {
		t.Fatal(err)
	}
	live, _ := idempotency.NewGuard(b.Store, idempotency.Options{Lease: time.Hour})
	if _, err := live.Claim(ctx, "CHG-DY-LIVE", "fp"); err != nil {
		t.Fatal(err)
	}
	b.Close()

	r := runCmd(ctx, env, "stuck")
	if r.code != 0 || !strings.Contains(r.stdout, "1 claim(s) IN_PROGRESS past their lease") || !strings.Contains(r.stdout, "CHG-DY-STUCK") ||
		strings.Contains(r.stdout, "CHG-DY-WAIT") || strings.Contains(r.stdout, "CHG-DY-LIVE") {
		t.Fatalf("stuck: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCmd(ctx, env, "stuck", "--json")
	var sj status.StuckJSON
	if err := json.Unmarshal([]byte(r.stdout), &sj); r.code != 0 || err != nil || sj.Total != 1 || len(sj.Claims) != 1 || sj.Claims[0].ChargeID != "CHG-DY-STUCK" {
		t.Fatalf("stuck --json: %d %v %+v\n%s", r.code, err, sj, r.stderr)
	}
	r = runCmd(ctx, env, "status", "--json")
	var st status.Report
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil {
		t.Fatalf("status: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if st.Stuck != 1 || st.Records[driver.StateInProgress] != 2 || st.Records[driver.StateWaiting] != 1 || st.Records[driver.StateFailed] != 1 {
		t.Fatalf("status = stuck %d, records %v (%s); want 1 stuck, 2 IN_PROGRESS, 1 WAITING, 1 FAILED", st.Stuck, st.Records, st.RecordsNote)
	}
}
