package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/lambdatest"
	"github.com/finedge/idempotent-consumer/queue"
)

// Simulator seed 7 in small: a charge first received when its message is
// already old (a backlog), declined twice with a retry schedule whose sum
// fits the queue's retention (so the old start check passed) but whose
// last attempt comes after the original message's age has passed the
// retention. A Lambda that only hides the message loses it (SQS deletes it
// by age, the record waits for ever); one that starts a waiting message
// over on its second receive keeps it: a copy carrying the not-before
// lands on the queue, and the charge is resumed and posted once.
//
// Real time on the emulator (moto deletes by MessageRetentionPeriod,
// whose least is 60 s): about 70 s.
func TestLambdaWaitOutlivesTheOriginalMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("about 70 s of real time")
	}
	const account = "001234567777"
	f := newFn(t, corebanksim.Faults{DeclineAccounts: map[string]string{account: "INSUFFICIENT_FUNDS*2"}},
		"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=15s×2", "IC_RETRY_MAX_ATTEMPTS=3")
	if _, err := f.sqs.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(f.q.URL),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameMessageRetentionPeriod): "60"}}); err != nil {
		t.Fatal(err)
	}
	f.start()
	const id = "CHG-L-SEED7"
	if _, err := f.sqs.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(f.q.URL), MessageBody: aws.String(chargeBody(id, account))}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	time.Sleep(30 * time.Second) // a backlog: first received at half the retention

	// The event source mapping: receive, invoke, delete what is not named.
	copies := 0
	for time.Since(sent) < 100*time.Second && len(f.ledger.Entries()) == 0 {
		out, err := f.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.q.URL), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			continue
		}
		var ev events.SQSEvent
		idOf := map[string]string{}
		for _, m := range out.Messages {
			rec := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
				Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:charges", AWSRegion: "us-east-1",
				MessageAttributes: map[string]events.SQSMessageAttribute{}}
			for k, v := range m.MessageAttributes {
				rec.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue}
			}
			if nb := rec.MessageAttributes[queue.NotBeforeAttribute].StringValue; nb != nil {
				if _, err := time.Parse(time.RFC3339Nano, *nb); err != nil {
					t.Errorf("a copy's not-before %q: %v", *nb, err)
				}
				if rec.Attributes["ApproximateReceiveCount"] == "1" {
					copies++
				}
			}
			ev.Records = append(ev.Records, rec)
			idOf[rec.MessageId] = rec.MessageId
		}
		named := map[string]bool{}
		for _, n := range f.invoke(ev, idOf, time.Minute) {
			named[n] = true
		}
		for _, rec := range ev.Records {
			age := ""
			if ms, err := strconv.ParseInt(rec.Attributes["SentTimestamp"], 10, 64); err == nil {
				age = time.Since(time.UnixMilli(ms)).Round(time.Second).String()
			}
			t.Logf("t=%s: message %s (receive %s, age %s, not-before %v): named %v", time.Since(sent).Round(time.Second), rec.MessageId,
				rec.Attributes["ApproximateReceiveCount"], age, rec.MessageAttributes[queue.NotBeforeAttribute].StringValue != nil, named[rec.MessageId])
			if named[rec.MessageId] {
				continue
			}
			if _, err := f.sqs.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(f.q.URL), ReceiptHandle: aws.String(rec.ReceiptHandle)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	posted := f.ledger.PostingsByKey()
	if len(posted) != 1 || posted[charge.BankKey(id, 3)] != 1 {
		t.Fatalf("postings %v after %s, want the third attempt posted once: the waiting charge's message was lost (deleted by age at %s)",
			posted, time.Since(sent).Round(time.Second), 60*time.Second)
	}
	if copies == 0 {
		t.Error("no copy with a not-before was received: the message was not started over")
	}
	want(t, "DLQ", f.dlq(), nil)
}

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
