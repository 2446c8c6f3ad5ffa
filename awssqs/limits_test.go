package awssqs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
)

// recorder is an SQS client that keeps every send and answers it: what
// the queue asks of SQS, without a server.
type recorder struct {
	awssqs.API
	sends   []*sqs.SendMessageInput
	batches []*sqs.SendMessageBatchInput
}

func (r *recorder) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	r.sends = append(r.sends, in)
	return &sqs.SendMessageOutput{MessageId: aws.String(fmt.Sprint(len(r.sends)))}, nil
}

func (r *recorder) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	r.batches = append(r.batches, in)
	return &sqs.SendMessageBatchOutput{}, nil
}

func (r *recorder) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return &sqs.DeleteMessageOutput{}, nil
}

func recorded(t *testing.T) (*recorder, *awssqs.Queue) {
	t.Helper()
	r := &recorder{}
	q, err := awssqs.New(r, awssqs.Options{QueueURL: "q", DLQURL: "dlq", WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r, q
}

// What SQS refuses in message attributes, and moto takes, is refused
// before anything is sent: on AWS the producer would get
// InvalidParameterValue, in the tests a message.
func TestSendRefusesAttributesSQSRefuses(t *testing.T) {
	eleven := map[string]string{}
	for i := range 11 {
		eleven[fmt.Sprintf("a%d", i)] = "v"
	}
	for name, attrs := range map[string]map[string]string{
		"eleven attributes":   eleven,
		"AWS. prefix":         {"AWS.trace": "v"},
		"amazon. prefix":      {"amazon.x": "v"},
		"leading period":      {".x": "v"},
		"trailing period":     {"x.": "v"},
		"two periods":         {"a..b": "v"},
		"a space":             {"a b": "v"},
		"a slash":             {"a/b": "v"},
		"257 characters":      {strings.Repeat("n", 257): "v"},
		"empty value":         {"k": ""},
		"NUL in value":        {"k": "a\x00b"},
		"escape in value":     {"k": "\x1b[31m"},
		"U+FFFE in value":     {"k": "a\uFFFEb"},
		"invalid UTF-8 value": {"k": "a\xffb"},
	} {
		t.Run(name, func(t *testing.T) {
			r, q := recorded(t)
			if _, err := q.Send(t.Context(), []byte("{}"), attrs); err == nil {
				t.Fatalf("Send with %q: no error, want SQS's refusal told before sending", attrs)
			}
			if _, err := q.SendBatch(t.Context(), []queue.Outgoing{{Body: []byte("{}")}, {Body: []byte("{}"), Attributes: attrs}}); err == nil ||
				!strings.Contains(err.Error(), "message 1") {
				t.Fatalf("SendBatch with %q: %v, want the refusal naming message 1", attrs, err)
			}
			if len(r.sends)+len(r.batches) != 0 {
				t.Fatalf("%d sends, %d batches: nothing may be sent", len(r.sends), len(r.batches))
			}
		})
	}
	r, q := recorded(t)
	ok := map[string]string{"traceparent": "00-x", "AWSTraceHeader": "Root=1", "a.b-c_D9": "é\t\n\r\U0001F600", strings.Repeat("n", 256): "v"}
	if _, err := q.Send(t.Context(), []byte("{}"), ok); err != nil || len(r.sends) != 1 {
		t.Fatalf("Send with %q: %v, want it sent", ok, err)
	}
}

// SQS refuses a batch whose messages together pass its limit
// (BatchRequestTooLong, 1 MiB, on moto too): SendBatch keeps each batch
// within the one-message limit the queue keeps (queue.MaxMessageBytes).
func TestSendBatchKeepsEachBatchUnderThePayloadLimit(t *testing.T) {
	r, q := recorded(t)
	var msgs []queue.Outgoing
	for i := range 25 {
		msgs = append(msgs, queue.Outgoing{Body: []byte(strings.Repeat("x", 60<<10)), Attributes: map[string]string{"n": fmt.Sprint(i)}})
	}
	for i := range 15 {
		msgs = append(msgs, queue.Outgoing{Body: []byte(fmt.Sprintf("small %d", i))})
	}
	n, err := q.SendBatch(t.Context(), msgs)
	if err != nil || n != len(msgs) {
		t.Fatalf("SendBatch = %d, %v", n, err)
	}
	sent := 0
	for i, b := range r.batches {
		size := 0
		for _, e := range b.Entries {
			size += len(aws.ToString(e.MessageBody))
			for k, v := range e.MessageAttributes {
				size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
			}
			if want := msgs[sent].Body; aws.ToString(e.MessageBody) != string(want) {
				t.Fatalf("batch %d: message %d out of order", i, sent)
			}
			sent++
		}
		if len(b.Entries) > 10 || size > queue.MaxMessageBytes {
			t.Fatalf("batch %d: %d messages, %d bytes; SQS takes 10 and %d", i, len(b.Entries), size, queue.MaxMessageBytes)
		}
	}
	if sent != len(msgs) || len(r.batches) != 8 {
		t.Fatalf("%d messages in %d batches, want %d in 8 (six of four large ones, the last large one with nine small ones, six small ones)", sent, len(r.batches), len(msgs))
	}
}

// A dead letter's reason is the queue's own text: a character SQS refuses
// in it (an error quoting a control character) is replaced, and an empty
// value (no reason code) is left out, so the forward is not refused.
func TestADeadLetterCarriesOnlyWhatSQSTakes(t *testing.T) {
	r, q := recorded(t)
	m := queue.Message{ID: "m1", Receipt: "r", Body: []byte("{}"), ReceiveCount: 2, Attributes: map[string]string{"traceparent": "00-x"}}
	if err := q.DeadLetter(t.Context(), m, queue.Reason{Detail: "bad byte \x00 and \x1b[31m in \xff"}); err != nil {
		t.Fatal(err)
	}
	if len(r.sends) != 1 {
		t.Fatalf("%d sends, want the one forward", len(r.sends))
	}
	attrs := map[string]string{}
	for k, v := range r.sends[0].MessageAttributes {
		attrs[k] = aws.ToString(v.StringValue)
	}
	if _, ok := attrs[queue.CodeAttribute]; ok {
		t.Fatalf("an empty reason code was sent: %q", attrs)
	}
	if d := attrs[queue.DetailAttribute]; d != "bad byte \uFFFD and \uFFFD[31m in \uFFFD" {
		t.Fatalf("detail %q, want the refused characters replaced", d)
	}
	if attrs["traceparent"] != "00-x" || attrs[queue.SourceIDAttribute] != "m1" {
		t.Fatalf("attributes %q, want the original's and the source id", attrs)
	}
}

// On the emulator, which refuses a batch over 1 MiB as SQS does
// (BatchRequestTooLong): ten messages of 200 KiB are sent (a batch each)
// and all arrive.
func TestSendBatchOfLargeMessagesOnTheEmulator(t *testing.T) {
	c, qs := newQueues(t, awssqs.QueueSpec{})
	q, err := awssqs.New(c, awssqs.Options{QueueURL: qs.URL, DLQURL: qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []queue.Outgoing
	for i := range 10 {
		msgs = append(msgs, queue.Outgoing{Body: []byte(fmt.Sprintf("%02d", i) + strings.Repeat("x", 200<<10))})
	}
	if n, err := q.SendBatch(t.Context(), msgs); err != nil || n != 10 {
		t.Fatalf("SendBatch = %d, %v", n, err)
	}
	got := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); len(got) < 10 && time.Now().Before(deadline); {
		ms, err := q.Receive(t.Context(), 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			got[string(m.Body[:2])] = true
		}
	}
	if len(got) != 10 {
		t.Fatalf("received %d of the 10 messages", len(got))
	}
}

func newQueues(t *testing.T, spec awssqs.QueueSpec) (*sqs.Client, awssqs.Queues) {
	t.Helper()
	c := sqs.NewFromConfig(awstest.Config(t))
	name := awstest.Name("charges")
	spec.Name, spec.DLQName = name, name+"-dlq"
	qs, err := awssqs.CreateQueues(t.Context(), c, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = awssqs.DeleteQueue(t.Context(), c, qs.URL)
		_ = awssqs.DeleteQueue(t.Context(), c, qs.DLQURL)
	})
	return c, qs
}

// SQS (on the emulator) passes the queue conformance suite.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{
		AcceptsStaleReceipts: true,
		Open: func(t *testing.T, o queuetest.Options) queue.Queue {
			if o.MaxReceiveCount == 0 {
				o.MaxReceiveCount = 1000
			}
			c, qs := newQueues(t, awssqs.QueueSpec{VisibilityTimeout: o.Visibility, MaxReceiveCount: o.MaxReceiveCount})
			q, err := awssqs.New(c, awssqs.Options{QueueURL: qs.URL, DLQURL: qs.DLQURL, WaitTime: time.Second, VisibilityTimeout: o.Visibility})
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
	})
}

func TestNewChecksOptions(t *testing.T) {
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	for name, o := range map[string]awssqs.Options{
		"no queue":      {DLQURL: "d"},
		"no dlq":        {QueueURL: "q"},
		"wait over 20s": {QueueURL: "q", DLQURL: "d", WaitTime: 21 * time.Second},
	} {
		if _, err := awssqs.New(c, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
