package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/lambdatest"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// binary builds this command as Lambda runs it (bootstrap, lambda.norpc).
func binary(t *testing.T) string { return lambdatest.Build(t, ".", "CGO_ENABLED=0") }

const declinedAccount = "009999999999"

// fn is one test's function: its queues and table on the emulator, a bank
// simulator, a Runtime API server, and the environment of its processes.
type fn struct {
	t      *testing.T
	rt     *lambdatest.Runtime
	sqs    *sqs.Client
	q      awssqs.Queues
	ledger *corebanksim.Ledger
	env    []string
	guard  *idempotency.Guard
	keys   *idempotency.Fingerprinter
	store  *awsdynamodb.Store
}

func newFn(t *testing.T, faults corebanksim.Faults, extra ...string) *fn {
	t.Helper()
	cfg := awstest.Config(t)
	f := &fn{t: t, rt: lambdatest.Start(t), sqs: sqs.NewFromConfig(cfg)}
	name := awstest.Name("lambda")
	var err error
	if f.q, err = awssqs.CreateQueues(t.Context(), f.sqs, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq", VisibilityTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ddb := dynamodb.NewFromConfig(cfg)
	if err := awsdynamodb.CreateTable(t.Context(), ddb, name); err != nil {
		t.Fatal(err)
	}
	if f.store, err = awsdynamodb.New(ddb, name); err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef-lambda-test-key")
	keyFile := filepath.Join(t.TempDir(), "fingerprint.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if f.keys, err = idempotency.NewFingerprinter(key); err != nil {
		t.Fatal(err)
	}
	f.ledger = corebanksim.NewLedger(faults)
	bank := httptest.NewServer(corebanksim.Handler(f.ledger))
	t.Cleanup(bank.Close)
	f.env = append(os.Environ(), "AWS_LAMBDA_RUNTIME_API="+f.rt.Addr, "AWS_LAMBDA_FUNCTION_NAME="+name,
		"AWS_ENDPOINT_URL="+os.Getenv(awstest.EndpointEnv), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"IC_BACKEND=aws", "IC_QUEUE="+name, "IC_DLQ="+name+"-dlq", "IC_TABLE="+name, "IC_COREBANK_URL="+bank.URL,
		"IC_FINGERPRINT_KEY_FILE="+keyFile, "IC_NOTIFY=log", "IC_LAMBDA_CHECK_MAPPING=false", "IC_LOG_FORMAT=text",
		"IC_VISIBILITY=3s", "IC_LEASE=30s", "IC_SKEW_MARGIN=0", "IC_COREBANK_TIMEOUT=2s", "IC_NOTIFY_TIMEOUT=1s",
		"IC_LAMBDA_MIN_WORK=5s", "IC_LAMBDA_MARGIN=1s")
	f.env = append(f.env, extra...)
	lease := 30 * time.Second
	for _, e := range f.env {
		if v, ok := strings.CutPrefix(e, "IC_LEASE="); ok {
			lease, _ = time.ParseDuration(v)
		}
	}
	if f.guard, err = idempotency.NewGuard(f.store, idempotency.Options{Lease: lease, SkewMargin: -1}); err != nil {
		t.Fatal(err)
	}
	return f
}

// start runs one function process (an execution environment).
func (f *fn) start() {
	f.t.Helper()
	lambdatest.Run(f.t, binary(f.t), f.env)
}

func chargeBody(id, account string) string {
	return fmt.Sprintf(`{"schemaVersion":1,"chargeId":%q,"accountId":%q,"amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-12-01"}`, id, account)
}

// send puts bodies on the queue and receives them back as one SQS event,
// as the event source mapping does (real message ids and receipt handles).
func (f *fn) send(bodies ...string) (events.SQSEvent, map[string]string) {
	f.t.Helper()
	for _, b := range bodies {
		if _, err := f.sqs.SendMessage(f.t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(f.q.URL), MessageBody: aws.String(b)}); err != nil {
			f.t.Fatal(err)
		}
	}
	var ev events.SQSEvent
	idOf := map[string]string{} // message id → body's charge id (or the body)
	for len(ev.Records) < len(bodies) {
		out, err := f.sqs.ReceiveMessage(f.t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.q.URL), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, VisibilityTimeout: 60, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
		if err != nil {
			f.t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			f.t.Fatalf("received %d of %d messages", len(ev.Records), len(bodies))
		}
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
				Body: aws.ToString(m.Body), Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:charges",
				AWSRegion: "us-east-1"})
			var c struct{ ChargeID string }
			_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &c)
			idOf[aws.ToString(m.MessageId)] = cmpOr(c.ChargeID, aws.ToString(m.Body))
		}
	}
	return ev, idOf
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// invoke runs ev with left before its deadline and returns the charge ids
// of the records named in batchItemFailures (sorted).
func (f *fn) invoke(ev events.SQSEvent, idOf map[string]string, left time.Duration) []string {
	f.t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.t.Context(), left+60*time.Second)
	defer cancel()
	res, err := f.rt.Invoke(ctx, payload, time.Now().Add(left))
	if err != nil {
		f.t.Fatal(err)
	}
	if !res.OK {
		f.t.Fatalf("invocation failed: %s", res.Body)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(res.Body, &resp); err != nil || resp.BatchItemFailures == nil {
		f.t.Fatalf("response %s: %v", res.Body, err)
	}
	var ids []string
	for _, it := range resp.BatchItemFailures {
		ids = append(ids, idOf[it.ItemIdentifier])
	}
	slices.Sort(ids)
	return ids
}

// dlq returns the DLQ's messages as "chargeId code" (sorted).
func (f *fn) dlq() []string {
	f.t.Helper()
	var got []string
	for {
		out, err := f.sqs.ReceiveMessage(f.t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.q.DLQURL), MaxNumberOfMessages: 10,
			VisibilityTimeout: 60, MessageAttributeNames: []string{"All"}})
		if err != nil {
			f.t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			slices.Sort(got)
			return got
		}
		for _, m := range out.Messages {
			var c struct{ ChargeID string }
			_ = json.Unmarshal([]byte(aws.ToString(m.Body)), &c)
			got = append(got, cmpOr(c.ChargeID, aws.ToString(m.Body))+" "+aws.ToString(m.MessageAttributes[queue.CodeAttribute].StringValue))
		}
	}
}

func want(t *testing.T, what string, got, w []string) {
	t.Helper()
	slices.Sort(w)
	if !slices.Equal(got, w) {
		t.Fatalf("%s = %q, want %q", what, got, w)
	}
}

// wantPostedOnce: each charge is posted once in the bank's books.
func (f *fn) wantPostedOnce(ids ...string) {
	f.t.Helper()
	posted := f.ledger.PostingsByKey()
	got := 0
	for _, n := range posted {
		got += n
	}
	for _, id := range ids {
		if n := posted[charge.BankKey(id, 1)]; n != 1 {
			f.t.Errorf("charge %s posted %d times, want once (postings %v)", id, n, posted)
		}
	}
	if got != len(ids) {
		f.t.Errorf("%d postings, want %d (%v)", got, len(ids), posted)
	}
}

// Copies of a charge inside one batch and across batches, spread over two
// execution environments: each charge is debited once, every copy deleted.
func TestLambdaDuplicatesDebitOnce(t *testing.T) {
	f := newFn(t, corebanksim.Faults{})
	f.start()
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-A", "001234567890"), chargeBody("CHG-L-A", "001234567890"), chargeBody("CHG-L-B", "001234567891"),
		chargeBody("CHG-L-A", "001234567890"))
	want(t, "failures of batch 1", f.invoke(ev, ids, time.Minute), nil)
	for range 2 {
		ev, ids = f.send(chargeBody("CHG-L-A", "001234567890"), chargeBody("CHG-L-B", "001234567891"), chargeBody("CHG-L-C", "001234567892"))
		want(t, "failures of a later batch", f.invoke(ev, ids, time.Minute), nil)
	}
	f.wantPostedOnce("CHG-L-A", "CHG-L-B", "CHG-L-C")
	want(t, "DLQ", f.dlq(), nil)
}

// batchItemFailures are exactly the records to retry: a charge another
// invocation holds, and a charge whose bank answers 503. A decline and a
// malformed message are dead-lettered with their codes and not named.
func TestLambdaFailuresAreExactlyTheRecordsToRetry(t *testing.T) {
	f := newFn(t, corebanksim.Faults{DeclineAccounts: map[string]string{declinedAccount: "INSUFFICIENT_FUNDS"},
		FailFirst: map[string]int{charge.BankKey("CHG-L-503", 1): 1000}})
	held, err := charge.ParseEvent([]byte(chargeBody("CHG-L-HELD", "001234567890")))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := f.guard.Claim(t.Context(), held.ID, held.Fingerprint(f.keys)); err != nil || !c.Outcome.Owned() {
		t.Fatalf("plant another invocation's claim: %v %v", c.Outcome, err)
	}
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-HELD", "001234567890"), chargeBody("CHG-L-503", "001234567891"),
		chargeBody("CHG-L-DECLINE", declinedAccount), `{"not":"a charge"}`, chargeBody("CHG-L-OK", "001234567893"))
	want(t, "failures", f.invoke(ev, ids, time.Minute), []string{"CHG-L-HELD", "CHG-L-503"})
	f.wantPostedOnce("CHG-L-OK")
	want(t, "DLQ", f.dlq(), []string{"CHG-L-DECLINE debit_failed", `{"not":"a charge"} invalid`})
}

// An invocation with less time left than a charge can take starts none:
// no claim is written, nothing is debited, every record is named; the
// next invocation with time debits each once.
func TestLambdaNearDeadlineStartsNothing(t *testing.T) {
	f := newFn(t, corebanksim.Faults{})
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-N1", "001234567890"), chargeBody("CHG-L-N2", "001234567891"))
	want(t, "failures near the deadline", f.invoke(ev, ids, 4*time.Second), []string{"CHG-L-N1", "CHG-L-N2"})
	if n := len(f.ledger.Entries()); n != 0 {
		t.Fatalf("%d debits from an invocation that had no time", n)
	}
	if _, err := f.store.Get(t.Context(), "CHG-L-N1", time.Now()); err == nil {
		t.Fatal("a claim was written by an invocation that had no time to run it")
	}
	want(t, "failures with time", f.invoke(ev, ids, time.Minute), nil)
	f.wantPostedOnce("CHG-L-N1", "CHG-L-N2")
}

// A debit sent just before the invocation's deadline goes on at the bank
// after the function gave up on it (the bank is slow and posts all the
// same). The claim is not tied to the deadline: an invocation right after
// is told the charge is in progress and debits nothing; only once the
// lease has passed does a later one reclaim it, under the same bank key,
// and the charge is posted once.
func TestLambdaDeadlineNeverRunsTheWorkTwice(t *testing.T) {
	f := newFn(t, corebanksim.Faults{SlowRate: 1, SlowLatency: 3 * time.Second},
		"IC_LEASE=6s", "IC_LAMBDA_MIN_WORK=2s", "IC_COREBANK_TIMEOUT=1s")
	f.start()
	f.start()
	body := chargeBody("CHG-L-SLOW", "001234567890")
	ev, ids := f.send(body)
	claimed := time.Now()
	// Enough time to start (MinWork 2s + margin 1s), not for the bank.
	want(t, "failures of the first invocation", f.invoke(ev, ids, 3800*time.Millisecond), []string{"CHG-L-SLOW"})
	calls := f.ledger.Calls(charge.BankKey("CHG-L-SLOW", 1))
	ev2, ids2 := f.send(body)
	time.Sleep(time.Until(claimed.Add(4100 * time.Millisecond))) // past the first invocation's deadline
	want(t, "failures of a copy past the first deadline", f.invoke(ev2, ids2, time.Minute), []string{"CHG-L-SLOW"})
	if got := f.ledger.Calls(charge.BankKey("CHG-L-SLOW", 1)); got != calls {
		t.Fatalf("the bank was called %d times, then %d: a second invocation ran the work while the first one's debit was under way", calls, got)
	}
	time.Sleep(time.Until(claimed.Add(7 * time.Second))) // the lease has passed
	f.ledger.SetFaults(corebanksim.Faults{})             // the bank answers in time again
	want(t, "failures after the lease", f.invoke(ev2, ids2, time.Minute), nil)
	f.wantPostedOnce("CHG-L-SLOW")
}

// With the mapping check on, a function whose SQS mapping lacks
// ReportBatchItemFailures refuses to start (the Lambda API here is a fake
// that answers ListEventSourceMappings).
func TestLambdaRefusesAMappingWithoutPartialBatchResponses(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"EventSourceMappings":[{"UUID":"u-9","EventSourceArn":"arn:aws:sqs:us-east-1:1:charges","FunctionResponseTypes":[]}]}`)
	}))
	defer api.Close()
	key := filepath.Join(t.TempDir(), "fingerprint.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef-lambda-test-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := lambdatest.Start(t)
	cmd := exec.Command(binary(t))
	cmd.Env = append(os.Environ(), "AWS_LAMBDA_RUNTIME_API="+rt.Addr, "AWS_LAMBDA_FUNCTION_NAME=charges-fn",
		"AWS_ENDPOINT_URL_LAMBDA="+api.URL, "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"IC_BACKEND=aws", "IC_COREBANK_URL=http://127.0.0.1:1", "IC_FINGERPRINT_KEY_FILE="+key, "IC_NOTIFY=log")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ReportBatchItemFailures") || !strings.Contains(string(out), "u-9") {
		t.Fatalf("started (or failed for another reason) with a mapping without ReportBatchItemFailures: %v\n%s", err, out)
	}
}

// When the mapping cannot be read (no lambda:ListEventSourceMappings), the
// function starts, and a batch with a record to retry fails as a whole
// rather than trust a partial response Lambda may ignore; the records done
// in it are not done again.
func TestLambdaCannotTellFailsWholeBatches(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-Errortype", "AccessDeniedException")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"Message":"not authorized to perform: lambda:ListEventSourceMappings"}`)
	}))
	defer api.Close()
	f := newFn(t, corebanksim.Faults{FailFirst: map[string]int{charge.BankKey("CHG-L-W503", 1): 1000}},
		"IC_LAMBDA_CHECK_MAPPING=true", "AWS_ENDPOINT_URL_LAMBDA="+api.URL)
	f.start()
	ev, _ := f.send(chargeBody("CHG-L-WOK", "001234567890"), chargeBody("CHG-L-W503", "001234567891"))
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res, err := f.rt.Invoke(t.Context(), payload, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || !strings.Contains(string(res.Body), "failing the whole batch") {
			t.Fatalf("a batch with a record to retry and an unknown mapping answered OK=%v: %s", res.OK, res.Body)
		}
	}
	ev, ids := f.send(chargeBody("CHG-L-WOK", "001234567890"))
	want(t, "failures of a batch all done", f.invoke(ev, ids, time.Minute), nil)
	f.wantPostedOnce("CHG-L-WOK")
}

// ATTACK C1. A record not started for lack of time (deadline_near) is
// still a receive: it counts toward the queue's maxReceiveCount, and SQS
// moves it to the DLQ after MaxReceiveCount such receives without its
// work ever having run (and without a reason code). With the template's
// defaults (BatchSize 10, MinWork 25s, margin 5s, FunctionTimeout 60s),
// when the charges take their MinWork (a slow bank) an invocation can only
// be sure to start 2 of its 10 records; the other 8 are named for retry on
// every receive, so a record can be dead-lettered by the redrive policy
// untouched.
func TestAttackTemplateBatchLargerThanTheTimeoutCanStart(t *testing.T) {
	doc := tmpl(t)
	param := func(name string) any { return at(t, doc, "Parameters", name, "Default") }
	timeout := time.Duration(num(t, param("FunctionTimeout"))) * time.Second
	minWork, err := time.ParseDuration(param("MinWork").(string))
	if err != nil {
		t.Fatal(err)
	}
	margin, err := time.ParseDuration(at(t, doc, "Resources", "Function", "Properties", "Environment", "Variables", "IC_LAMBDA_MARGIN").(string))
	if err != nil {
		t.Fatal(err)
	}
	batch := num(t, param("BatchSize"))
	started := 0
	for left := timeout; left >= minWork+margin; left -= minWork {
		started++
	}
	if batch > started {
		t.Errorf("BatchSize %d, but a %s invocation is sure to start only %d records of MinWork %s (+ margin %s): the other %d are named deadline_near and burn a receive each time (MaxReceiveCount %v), reaching the DLQ without having run",
			batch, timeout, started, minWork, margin, batch-started, param("MaxReceiveCount"))
	}
}

// The function reads pipeline.Config, so IC_POSTING_WINDOWS (and
// IC_HOLIDAYS) pass its checks; but nothing in it gates a debit by the
// calendar: a function configured with Monday-to-Friday windows debits on
// Sunday at 03:00. It must refuse the setting, saying so, rather than
// accept it and ignore it.
func TestAttackLambdaRefusesPostingWindowsItCannotKeep(t *testing.T) {
	for name, setting := range map[string]map[string]string{
		"IC_POSTING_WINDOWS": {"IC_POSTING_WINDOWS": "Mon-Fri 06:00-20:00 Asia/Kolkata"},
	} {
		if err := setupWith(t, setting); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("the function with %v: %v; want it refused, naming %s", setting, err, name)
		}
	}
}

// setupWith runs the function's setup with extra settings, against no AWS.
func setupWith(t *testing.T, extra map[string]string) error {
	t.Helper()
	key := filepath.Join(t.TempDir(), "fingerprint.key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef-lambda-test-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing answers on AWS's behalf: a function that got past its checks
	// fails on its first call, for another reason.
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	env := map[string]string{
		"IC_BACKEND": "aws", "IC_COREBANK_URL": "http://127.0.0.1:1", "IC_FINGERPRINT_KEY_FILE": key, "IC_NOTIFY": "log",
		"IC_LAMBDA_CHECK_MAPPING": "false",
	}
	for k, v := range extra {
		env[k] = v
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := setup(ctx, func(k string) string { return env[k] }, io.Discard)
	return err
}

// The Lambda reads the recovery policy's settings (they are
// pipeline.Config's: IC_NOTICE_LEAD, IC_RETRY_DECLINES…), checks them and
// starts — and then builds its charge service without them. With
// IC_NOTICE_LEAD=24h the charge is debited on its first delivery, with no
// advance notice before it: the debit the mode exists to forbid.
func TestLambdaNoticeLeadSendsTheNoticeAndDoesNotDebit(t *testing.T) {
	f := newFn(t, corebanksim.Faults{}, "IC_NOTICE_LEAD=24h")
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-NOTICE", "001234567890"))
	f.invoke(ev, ids, time.Minute)
	if n := len(f.ledger.PostingsByKey()); n != 0 {
		t.Errorf("debited on the first delivery (%d postings) with IC_NOTICE_LEAD=24h: no advance notice, no lead", n)
	}
	if r, err := f.guard.Get(t.Context(), "CHG-L-NOTICE"); err != nil || r.State != driver.StateWaiting || r.Status != string(charge.NoticeSent) {
		t.Errorf("record %+v %v, want WAITING NOTICE_SENT", r, err)
	}
}

// IC_RETRY_DECLINES likewise: a decline the schedule retries is
// dead-lettered FAILED as without one.
func TestLambdaRetryDeclinesSchedulesTheRetry(t *testing.T) {
	f := newFn(t, corebanksim.Faults{DeclineAccounts: map[string]string{declinedAccount: "INSUFFICIENT_FUNDS"}},
		"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=24h×3")
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-RETRY", declinedAccount))
	f.invoke(ev, ids, time.Minute)
	if r, err := f.guard.Get(t.Context(), "CHG-L-RETRY"); err != nil || r.State != driver.StateWaiting || r.Generation != 2 {
		t.Errorf("record %+v %v, want WAITING under generation 2 (the retry scheduled)", r, err)
	}
	want(t, "DLQ", f.dlq(), nil)
}

// IC_POSTING_WINDOWS likewise: the Lambda has no gate, so a charge that
// arrives while the bank's window is closed is posted at once. It must
// either keep the window or refuse to start.
func TestLambdaPostingWindowsIsKeptOrRefused(t *testing.T) {
	closed := time.Now().UTC().AddDate(0, 0, 3).Weekday().String()[:3] + " 00:00-00:01 UTC" // a minute of a day that is not today
	f := newFn(t, corebanksim.Faults{}, "IC_POSTING_WINDOWS="+closed)
	env := map[string]string{}
	for _, e := range f.env {
		if k, v, ok := strings.Cut(e, "="); ok {
			env[k] = v
		}
	}
	var stderr strings.Builder
	h, err := setup(t.Context(), func(k string) string { return env[k] }, &stderr)
	if err != nil {
		if !strings.Contains(err.Error(), "IC_POSTING_WINDOWS") && !strings.Contains(err.Error(), "posting-windows") {
			t.Fatalf("refused, without naming the setting: %v", err)
		}
		return
	}
	ev, _ := f.send(chargeBody("CHG-L-WINDOW", "001234567890"))
	if _, err := h(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	if n := len(f.ledger.PostingsByKey()); n != 0 {
		t.Errorf("posted %d debit(s) outside the posting window %q", n, closed)
	}
}

type noDebit struct{ t *testing.T }

func (n noDebit) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	n.t.Error("a malformed record was debited")
	return charge.DebitReceipt{}, charge.Permanent(nil)
}

// The function's path for a record whose fields are shifted (an account
// number in each field in turn), through lambdasqs as the function wires
// it: dead-lettered as invalid with the field named, and neither the DLQ
// reason nor any log line (the function's, lambdasqs's) holds the account.
func TestLambdaShiftedFieldsNeverReachTheDLQReasonOrTheLog(t *testing.T) {
	const account = "445566778899"
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: noDebit{t}, Notifier: notifysim.NewRecorder(0, log), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dead := map[string]queue.Reason{}
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: log,
		DeadLetter: func(_ context.Context, m events.SQSMessage, r queue.Reason) error {
			mu.Lock()
			defer mu.Unlock()
			dead[m.MessageId] = r
			return nil
		}}, process(svc, log))
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range wiretest.Shifted(account) {
		t.Run(tt.Name, func(t *testing.T) {
			before := len(logs.String())
			id := fmt.Sprintf("m-%d", i)
			resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: id, Body: tt.Body,
				EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:charges"}}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("invocation: %v %+v, want the record dead-lettered, not retried", err, resp)
			}
			mu.Lock()
			r, ok := dead[id]
			mu.Unlock()
			if !ok || r.Code != "invalid" {
				t.Fatalf("dead-lettered %v with %+v, want code invalid", ok, r)
			}
			line := logs.String()[before:]
			if tt.Field != "" && (!strings.Contains(r.String(), tt.Field) || !strings.Contains(line, tt.Field)) {
				t.Errorf("the field %s is not named: DLQ reason %q, log %s", tt.Field, r, line)
			}
			if f := wiretest.Leaks(r.String(), account); f != "" {
				t.Errorf("the DLQ reason holds the account (%s): %q", f, r)
			}
			if f := wiretest.Leaks(line, account); f != "" {
				t.Errorf("a log line holds the account (%s): %s", f, line)
			}
		})
	}
}

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
