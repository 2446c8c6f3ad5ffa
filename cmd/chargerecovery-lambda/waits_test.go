package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/lambdatest"
)

// The Lambda hides a waiting charge's message on its first receive and
// starts it over as a copy on the next, so the schedule's sum is no longer
// bounded by the queue: 72h×3 on a 96h queue starts. What even that cannot
// keep is refused at start, naming the variable, the wait and the
// retention: one hide as long as the queue's retention, a maxReceiveCount
// under 2.
func TestLambdaRefusesWaitsTheQueueCannotKeep(t *testing.T) {
	cfg := awstest.Config(t)
	name := awstest.Name("lambdawait")
	sqsc := sqs.NewFromConfig(cfg)
	if _, err := awssqs.CreateQueues(t.Context(), sqsc, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq",
		VisibilityTimeout: time.Minute, Retention: 96 * time.Hour, MaxReceiveCount: 10}); err != nil {
		t.Fatal(err)
	}
	short := name + "-short" // kept 10 hours, moved to the DLQ at its first receive
	if _, err := awssqs.CreateQueues(t.Context(), sqsc, awssqs.QueueSpec{Name: short, DLQName: short + "-dlq",
		VisibilityTimeout: time.Minute, Retention: 10 * time.Hour, MaxReceiveCount: 10}); err != nil {
		t.Fatal(err)
	}
	once := name + "-once"
	if _, err := awssqs.CreateQueues(t.Context(), sqsc, awssqs.QueueSpec{Name: once, DLQName: once + "-dlq",
		VisibilityTimeout: time.Minute, Retention: 96 * time.Hour, MaxReceiveCount: 1}); err != nil {
		t.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(cfg)
	if err := awsdynamodb.CreateTable(t.Context(), ddb, name); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "fingerprint.key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef-lambda-test-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"AWS_ENDPOINT_URL=" + os.Getenv(awstest.EndpointEnv), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"IC_BACKEND=aws", "IC_QUEUE=" + name, "IC_DLQ=" + name + "-dlq", "IC_TABLE=" + name, "IC_COREBANK_URL=http://127.0.0.1:1",
		"IC_FINGERPRINT_KEY_FILE=" + keyFile, "IC_NOTIFY=log", "IC_LAMBDA_CHECK_MAPPING=false", "IC_LOG_FORMAT=text",
		"IC_LEASE=30s", "IC_COREBANK_TIMEOUT=2s", "IC_NOTIFY_TIMEOUT=1s", "IC_LAMBDA_MIN_WORK=5s", "IC_LAMBDA_MARGIN=1s"}
	getenv := func(extra ...string) func(string) string {
		all := append(append([]string{}, env...), extra...)
		return func(k string) string {
			v := ""
			for _, e := range all {
				if val, ok := strings.CutPrefix(e, k+"="); ok {
					v = val
				}
			}
			return v
		}
	}

	// The process exits non-zero, saying why.
	rt := lambdatest.Start(t).Addr
	// (A function that starts waits for invocations: the timeout ends it.)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t))
	cmd.Env = append(os.Environ(), append(env, "AWS_LAMBDA_RUNTIME_API="+rt, "AWS_LAMBDA_FUNCTION_NAME="+name, "IC_QUEUE="+short, "IC_DLQ="+short+"-dlq", "IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=24h×3")...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "IC_RETRY_DECLINES") || !strings.Contains(string(out), "10h0m0s") || !strings.Contains(string(out), "refusing to start") {
		t.Fatalf("started (or failed for another reason) with INSUFFICIENT_FUNDS=24h×3 on a 10h queue: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		name  string
		extra []string
		bad   string
	}{
		{"72h×3 on 96h: each wait started over", []string{"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=72h×3"}, ""},
		{"a notice lead and 24h×3 on 96h", []string{"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=24h×3", "IC_NOTICE_LEAD=24h"}, ""},
		{"6h×10 on 96h and 10 receives", []string{"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=6h×10", "IC_RETRY_MAX_ATTEMPTS=11"}, ""},
		{"a 12h hide outlives a 10h queue", []string{"IC_QUEUE=" + short, "IC_DLQ=" + short + "-dlq", "IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=24h×1"}, "deleted by age while hidden"},
		{"8h×2 within a 10h queue", []string{"IC_QUEUE=" + short, "IC_DLQ=" + short + "-dlq", "IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=8h×2"}, ""},
		{"maxReceiveCount 1", []string{"IC_QUEUE=" + once, "IC_DLQ=" + once + "-dlq", "IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=1h×1"}, "second receive"},
		{"no schedule", nil, ""},
	} {
		_, err := setup(t.Context(), getenv(tc.extra...), io.Discard)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.bad)
		}
	}
}
