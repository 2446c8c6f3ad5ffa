package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/queue"
)

// sqsDLQ is the DLQ of an awsSetup environment, filled by the test.
type sqsDLQ struct {
	c   *sqs.Client
	url string
}

// fillSQSDLQ dead-letters n declined charges CHG-SQSDLQ-00… onto env's
// DLQ, as the consumer does (body plus the dead-letter attributes).
func fillSQSDLQ(t *testing.T, env map[string]string, n int) sqsDLQ {
	t.Helper()
	c := sqs.NewFromConfig(awstest.Config(t))
	url, err := awssqs.QueueURL(t.Context(), c, env["IC_DLQ"])
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < n; start += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i := start; i < min(start+10, n); i++ {
			attrs := map[string]types.MessageAttributeValue{}
			for k, v := range queue.DeadLetterAttributes(queue.Message{ID: fmt.Sprintf("src-%d", i), ReceiveCount: 1},
				queue.Reason{Code: "debit_failed", Detail: "debit declined: INSUFFICIENT_FUNDS"}, 10) {
				attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			}
			body := fmt.Sprintf(`{"schemaVersion":1,"chargeId":"CHG-SQSDLQ-%02d","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-12-01"}`, i)
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(body), MessageAttributes: attrs})
		}
		if _, err := c.SendMessageBatch(t.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	d := sqsDLQ{c: c, url: url}
	d.wantAllVisible(t, "filled", n)
	return d
}

// wantAllVisible: the DLQ holds n messages, every one visible (the
// emulator's counts are exact).
func (d sqsDLQ) wantAllVisible(t *testing.T, after string, n int) {
	t.Helper()
	out, err := d.c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(d.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	v, inv := out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)], out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)]
	if v != strconv.Itoa(n) || inv != "0" {
		t.Fatalf("after %s: the DLQ shows %s visible, %s not visible; want %d visible, 0 not visible", after, v, inv, n)
	}
}

// dlqTotal is the total of a dlq list --json, or the test ends.
func dlqTotal(t *testing.T, r result) int {
	t.Helper()
	var out struct {
		Total  int `json:"total"`
		Unseen int `json:"unseen"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Unseen != 0 {
		t.Fatalf("dlq list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	return out.Total
}

// Reading the SQS DLQ never hides it (issue 35 item 3): two dlq list at
// once both see every entry (25: more than one receive brings); dlq show
// right after a list, and during one, finds its entry; every DLQ message
// is visible the moment a list returns; a redrive right after a list moves
// them all.
func TestSQSDLQReadersNeverHideItFromEachOther(t *testing.T) {
	emulatorInParallel(t)
	env := awsSetup(t, "dlqread")
	const n = 25
	dlq := fillSQSDLQ(t, env, n)

	lists := make(chan result, 2)
	for range 2 {
		go func() { lists <- runCmd(t.Context(), env, "dlq", "list", "--json") }()
	}
	for range 2 {
		if got := dlqTotal(t, <-lists); got != n {
			t.Errorf("one of two concurrent dlq list saw %d entries, want %d", got, n)
		}
	}
	dlq.wantAllVisible(t, "two dlq list", n)

	if r := runCmd(t.Context(), env, "dlq", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, fmt.Sprintf("%d DLQ entries", n)) {
		t.Fatalf("dlq list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	for _, id := range []string{"CHG-SQSDLQ-00", "CHG-SQSDLQ-24"} {
		if r := runCmd(t.Context(), env, "dlq", "show", id); r.code != 0 || !strings.Contains(r.stdout, id) {
			t.Errorf("dlq show %s right after a list: exit %d, %q %s", id, r.code, r.stdout, r.stderr)
		}
	}
	dlq.wantAllVisible(t, "dlq show", n)

	// A show while another operator lists.
	list := make(chan result, 1)
	go func() { list <- runCmd(t.Context(), env, "dlq", "list", "--json") }()
	if r := runCmd(t.Context(), env, "dlq", "show", "--json", "CHG-SQSDLQ-03"); r.code != 0 || !strings.Contains(r.stdout, `"chargeId":"CHG-SQSDLQ-03"`) {
		t.Errorf("dlq show during a list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	if got := dlqTotal(t, <-list); got != n {
		t.Errorf("dlq list during a show saw %d entries, want %d", got, n)
	}
	if r := runCmd(t.Context(), env, "status", "--metrics-url", ""); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("dlq       %d (debit_failed %d) (approximate)", n, n)) {
		t.Errorf("status: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	dlq.wantAllVisible(t, "a list, a show and status", n)

	r := runCmd(t.Context(), env, "redrive", "--reason", "debit_failed", "--operator", "tester")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("DLQ entries seen: %d; moved back to the queue: %d;", n, n)) {
		t.Fatalf("redrive right after a list: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	dlq.wantAllVisible(t, "the redrive", 0)
}

// A list or redrive that cannot see every DLQ message (another reader
// holds some for longer than it waits) says so and exits 1, never a quiet
// short count. The holder here is a raw receive with a 10-minute
// visibility; the scan waits its full minute, so this test takes one.
func TestSQSDLQReadShortOfTheDLQExitsOneSayingHowManyItMissed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a scan's minute")
	}
	emulatorInParallel(t)
	env := awsSetup(t, "dlqshort")
	dlq := fillSQSDLQ(t, env, 12)
	if out, err := dlq.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq.url), MaxNumberOfMessages: 2, VisibilityTimeout: 600}); err != nil || len(out.Messages) != 2 {
		t.Fatalf("hold 2: %v", err)
	}
	for _, args := range [][]string{
		{"dlq", "list"},
		{"redrive", "--operator", "tester"},
	} {
		r := runCmd(t.Context(), env, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "about 2 DLQ message(s) could not be seen") || !strings.Contains(r.stderr, "approximate") {
			t.Errorf("%v with 2 held elsewhere: exit %d, %q %s", args, r.code, r.stdout, r.stderr)
		}
		if args[0] == "redrive" && !strings.Contains(r.stdout, "DLQ entries seen: 10; moved back to the queue: 10;") {
			t.Errorf("redrive with 2 held elsewhere: %q, want the 10 it saw moved", r.stdout)
		}
	}
}
