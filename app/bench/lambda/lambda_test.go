// Package lambda measures the Lambda entry point (cmd/chargerecovery-lambda)
// on the emulator: its cold start and its per-record cost, to set beside
// the long-running consumer's (chargerecovery bench --backend aws) on the
// same emulator (scripts/bench-lambda.sh runs both).
//
// The function runs as Lambda runs a provided.al2023 function: the
// bootstrap binary (built with -tags lambda.norpc) is started with
// AWS_LAMBDA_RUNTIME_API pointing at a local Runtime API server
// (internal/lambdatest, the protocol aws-lambda-go's runtime client
// speaks), asks it for the next invocation and posts the result. A cold
// start is one fresh process: from exec to the first record's result
// posted, so it holds the Go runtime's start, the configuration, the
// preflight against the emulator (table, queues, retention) and the first
// record's claim, debit and DONE. What Lambda adds before exec (the
// execution environment, the code download) is not in it. The records are
// real SQS messages (sent and received outside the timing, as the event
// source mapping receives them); the ESM's receive and delete are not the
// function's cost and are not timed.
//
//	scripts/with-moto.sh go test -run '^$' -bench Lambda -benchtime 1x ./bench/lambda -args -rounds 5
package lambda

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
)

var (
	rounds   = flag.Int("rounds", 3, "cold starts (one fresh process each)")
	batches  = flag.Int("batches", 5, "warm batches of each size per process")
	batch    = flag.Int("batch", 10, "records in a warm batch (SQS's event source mapping default is 10)")
	prebuilt = flag.String("bootstrap", "", "the function's binary, built with -tags lambda.norpc (empty: build ../../../cmd/chargerecovery-lambda)")
	conc     = flag.Int("lambda-concurrency", 10, "IC_LAMBDA_CONCURRENCY: records of a batch run at once")
)

// Result is what the benchmark prints (one JSON line per round).
type Result struct {
	Round            int     `json:"round"`
	ColdStartMs      float64 `json:"cold_start_ms"`      // exec → first record's result
	WarmOneMs        float64 `json:"warm_one_ms"`        // median batch of 1 record, same process
	WarmBatchMs      float64 `json:"warm_batch_ms"`      // median batch of -batch records
	WarmPerRecordMs  float64 `json:"warm_per_record_ms"` // WarmBatchMs / -batch
	Batch            int     `json:"batch"`
	Concurrency      int     `json:"lambda_concurrency"`
	RecordsPerSecond float64 `json:"records_per_s"` // 1000 / WarmPerRecordMs
}

func BenchmarkLambda(b *testing.B) {
	cfg := awstest.Config(b)
	bin := *prebuilt
	if bin == "" {
		bin = lambdatest.Build(b, "../../../cmd/chargerecovery-lambda", "CGO_ENABLED=0")
	}
	ctx := b.Context()
	sqsc := sqs.NewFromConfig(cfg)
	name := awstest.Name("lambdabench")
	q, err := awssqs.CreateQueues(ctx, sqsc, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq", VisibilityTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(cfg)
	if err := awsdynamodb.CreateTable(ctx, ddb, name); err != nil {
		b.Fatal(err)
	}
	keyFile := filepath.Join(b.TempDir(), "fingerprint.key")
	if err := os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef-lambda-bench-key"), 0o600); err != nil {
		b.Fatal(err)
	}
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	b.Cleanup(bank.Close)
	rt := lambdatest.Start(b)
	env := append(os.Environ(), "AWS_LAMBDA_RUNTIME_API="+rt.Addr, "AWS_LAMBDA_FUNCTION_NAME="+name,
		"AWS_ENDPOINT_URL="+os.Getenv(awstest.EndpointEnv), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"IC_BACKEND=aws", "IC_QUEUE="+name, "IC_DLQ="+name+"-dlq", "IC_TABLE="+name, "IC_COREBANK_URL="+bank.URL,
		"IC_FINGERPRINT_KEY_FILE="+keyFile, "IC_NOTIFY=log", "IC_LAMBDA_CHECK_MAPPING=false", "IC_LOG_FORMAT=text", "IC_LOG_LEVEL=warn",
		"IC_LEASE=30s", "IC_COREBANK_TIMEOUT=2s", "IC_NOTIFY_TIMEOUT=1s", "IC_LAMBDA_MIN_WORK=5s", "IC_LAMBDA_MARGIN=1s",
		"IC_LAMBDA_CONCURRENCY="+strconv.Itoa(*conc))

	seq := 0
	event := func(n int) (events.SQSEvent, []string) { // n new charges, sent and received as the ESM does
		var ids []string
		for range n {
			seq++
			id := fmt.Sprintf("CHG-LB-%s-%06d", name, seq)
			ids = append(ids, id)
			body := fmt.Sprintf(`{"schemaVersion":1,"chargeId":%q,"accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-12-01"}`, id)
			if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)}); err != nil {
				b.Fatal(err)
			}
		}
		var ev events.SQSEvent
		for len(ev.Records) < n {
			out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, VisibilityTimeout: 120, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
			if err != nil {
				b.Fatal(err)
			}
			if len(out.Messages) == 0 {
				b.Fatalf("received %d of %d messages", len(ev.Records), n)
			}
			for _, m := range out.Messages {
				ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
					Body: aws.ToString(m.Body), Attributes: m.Attributes, EventSource: "aws:sqs",
					EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:" + name, AWSRegion: "us-east-1"})
			}
		}
		return ev, ids
	}
	var exited chan struct{} // closed when the current process ends
	var stderr strings.Builder
	invoke := func(ev events.SQSEvent) time.Duration {
		payload, err := json.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		ictx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		go func() {
			select {
			case <-exited:
				cancel()
			case <-ictx.Done():
			}
		}()
		start := time.Now()
		res, err := rt.Invoke(ictx, payload, time.Now().Add(time.Minute))
		took := time.Since(start)
		if err != nil {
			b.Fatalf("%v; the function's stderr:\n%s", err, stderr.String())
		}
		var resp events.SQSEventResponse
		if !res.OK || json.Unmarshal(res.Body, &resp) != nil || len(resp.BatchItemFailures) > 0 {
			b.Fatalf("invocation: ok=%v %s", res.OK, res.Body)
		}
		return took
	}
	var all []string
	for r := 1; r <= *rounds; r++ {
		ev, ids := event(1)
		all = append(all, ids...)
		cmd := exec.Command(bin)
		cmd.Env = env
		stderr.Reset()
		cmd.Stderr = &stderr
		exited = make(chan struct{})
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		done := exited
		go func() { _ = cmd.Wait(); close(done) }()
		invoke(ev)
		cold := time.Since(start) // exec → the first record's result
		var one, many []float64
		for range *batches {
			ev, ids := event(1)
			all = append(all, ids...)
			one = append(one, ms(invoke(ev)))
			ev, ids = event(*batch)
			all = append(all, ids...)
			many = append(many, ms(invoke(ev)))
		}
		_ = cmd.Process.Kill()
		<-done
		res := Result{Round: r, ColdStartMs: ms(cold), WarmOneMs: median(one), WarmBatchMs: median(many), Batch: *batch, Concurrency: *conc}
		res.WarmPerRecordMs = res.WarmBatchMs / float64(*batch)
		res.RecordsPerSecond = 1000 / res.WarmPerRecordMs
		line, _ := json.Marshal(res)
		fmt.Println(string(line))
	}
	// Exactly once: every charge posted once in the bank's books.
	posted := ledger.PostingsByKey()
	for _, id := range all {
		if n := posted[charge.BankKey(id, 1)]; n != 1 {
			b.Fatalf("charge %s posted %d times, want once", id, n)
		}
	}
	if len(posted) != len(all) {
		b.Fatalf("%d charges posted, want %d", len(posted), len(all))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
