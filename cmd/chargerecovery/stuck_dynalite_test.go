package main

import (
	"context"
	"encoding/json"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

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
