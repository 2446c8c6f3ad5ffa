package lambdasqs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/queue"
)

// waitQueue records what a runner asks of its source queue for a Wait.
type waitQueue struct {
	mu       sync.Mutex
	requeued []string // "id until"
	hidden   []string // "id d"
	sendErr  error
	block    bool // Requeue blocks until its context ends
}

func (q *waitQueue) options(now time.Time) lambdasqs.Options {
	return lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, Now: func() time.Time { return now },
		ChangeVisibility: func(_ context.Context, m events.SQSMessage, d time.Duration) error {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.hidden = append(q.hidden, fmt.Sprintf("%s %s", m.MessageId, d))
			return nil
		},
		Requeue: func(ctx context.Context, m events.SQSMessage, until time.Time) error {
			if q.block {
				<-ctx.Done()
				return ctx.Err()
			}
			if q.sendErr != nil {
				return q.sendErr
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			q.requeued = append(q.requeued, m.MessageId+" "+until.UTC().Format(time.RFC3339))
			return nil
		}}
}

func received(id string, count int, notBefore string) events.SQSMessage {
	m := events.SQSMessage{MessageId: id, Body: "k-" + id, EventSourceARN: "arn:aws:sqs:us-east-1:1:charges",
		Attributes: map[string]string{"ApproximateReceiveCount": fmt.Sprint(count)}}
	if notBefore != "" {
		m.MessageAttributes = map[string]events.SQSMessageAttribute{queue.NotBeforeAttribute: {DataType: "String", StringValue: aws.String(notBefore)}}
	}
	return m
}

// A Wait verdict on a record received before starts it over: a copy with
// the not-before is sent and the record left out of batchItemFailures (the
// mapping deletes it), nothing hidden. On its first receive it is hidden
// and named. A copy that cannot be sent falls back to the hide. On a FIFO
// queue it is always hidden.
func TestAWaitReceivedBeforeIsStartedOver(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	until := now.Add(20 * time.Hour)
	process := func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
		return lambdasqs.Verdict{Disposition: lambdasqs.Wait, Until: until}
	}
	fifo := received("f", 3, "")
	fifo.EventSourceARN = "arn:aws:sqs:us-east-1:1:charges.fifo"
	for _, tc := range []struct {
		name                      string
		rec                       events.SQSMessage
		sendErr                   error
		failures, requeued, hides string
	}{
		{"second receive", received("a", 2, ""), nil, "", "a 2030-01-02T23:00:00Z", ""},
		{"fifth receive", received("a", 5, ""), nil, "", "a 2030-01-02T23:00:00Z", ""},
		{"first receive", received("a", 1, ""), nil, "a", "", "a 11h55m0s"},
		{"no receive count", received("a", 0, ""), nil, "a", "", "a 11h55m0s"},
		{"send fails", received("a", 2, ""), errors.New("throttled"), "a", "", "a 11h55m0s"},
		{"fifo", fifo, nil, "f", "", "f 11h55m0s"},
	} {
		q := &waitQueue{sendErr: tc.sendErr}
		h, err := lambdasqs.Records(q.options(now), process)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{tc.rec}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(failures(resp), ","); got != tc.failures {
			t.Errorf("%s: failures %q, want %q", tc.name, got, tc.failures)
		}
		if got := strings.Join(q.requeued, ","); got != tc.requeued {
			t.Errorf("%s: requeued %q, want %q", tc.name, got, tc.requeued)
		}
		if got := strings.Join(q.hidden, ","); got != tc.hides {
			t.Errorf("%s: hidden %q, want %q", tc.name, got, tc.hides)
		}
	}
}

// A record whose not-before is still ahead is not processed (no claim, no
// store request): it waits again by the same rule, until the not-before.
// One whose not-before has passed, or is nonsense, is processed.
func TestARecordNotDueIsNotProcessed(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	nb := now.Add(3 * time.Hour).Format(time.RFC3339Nano)
	var ran []string
	process := func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
		ran = append(ran, m.MessageId)
		return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
	}
	q := &waitQueue{}
	h, err := lambdasqs.Records(q.options(now), process)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		received("first", 1, nb), received("again", 2, nb),
		received("due", 1, now.Add(-time.Second).Format(time.RFC3339Nano)), received("junk", 1, "tomorrow"),
		received("far", 1, now.Add(500*24*time.Hour).Format(time.RFC3339Nano)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ran, ","); got != "due,junk,far" {
		t.Errorf("processed %q, want due,junk,far: a record not due must not reach the store", got)
	}
	if got := strings.Join(failures(resp), ","); got != "first" {
		t.Errorf("failures %q, want first (again started over)", got)
	}
	if got := strings.Join(q.hidden, ","); got != "first 3h0m0s" {
		t.Errorf("hidden %q, want first for 3h", got)
	}
	if got := strings.Join(q.requeued, ","); got != "again 2030-01-02T06:00:00Z" {
		t.Errorf("requeued %q, want again until its not-before", got)
	}
}

// A Requeue that hangs is cut as a dead-letter send is (half the margin
// before the deadline), and the record falls back to being named.
func TestARequeueThatHangsIsBounded(t *testing.T) {
	q := &waitQueue{block: true}
	opts := q.options(time.Now())
	opts.Now = time.Now
	opts.Margin = 2 * time.Second
	h, err := lambdasqs.Records(opts, func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
		t.Error("processed a record not due")
		return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{received("a", 2, time.Now().Add(time.Hour).Format(time.RFC3339Nano))}})
	if took := time.Since(start); err != nil || took > time.Second || strings.Join(failures(resp), ",") != "a" {
		t.Errorf("took %s, failures %v, %v; want a, within half the margin before the deadline", took, failures(resp), err)
	}
}

// CopyAttributes keeps the record's string attributes but the dead-letter
// ones, and sets the not-before; without room for it the copy goes
// without.
func TestCopyAttributes(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	m := events.SQSMessage{Body: "b", MessageAttributes: map[string]events.SQSMessageAttribute{
		"trace": {DataType: "String", StringValue: aws.String("t1")}, queue.CodeAttribute: {DataType: "String", StringValue: aws.String("x")},
		queue.NotBeforeAttribute: {DataType: "String", StringValue: aws.String("old")}, "bin": {DataType: "Binary", BinaryValue: []byte{1}}}}
	got := lambdasqs.CopyAttributes(m, until)
	if len(got) != 2 || got["trace"] != "t1" || got[queue.NotBeforeAttribute] != "2030-01-02T03:04:05.000000006Z" {
		t.Errorf("CopyAttributes = %v", got)
	}
	full := events.SQSMessage{Body: "b", MessageAttributes: map[string]events.SQSMessageAttribute{}}
	for i := range queue.MaxAttributes {
		full.MessageAttributes[fmt.Sprint("a", i)] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("v")}
	}
	if got := lambdasqs.CopyAttributes(full, until); len(got) != queue.MaxAttributes || got[queue.NotBeforeAttribute] != "" {
		t.Errorf("CopyAttributes of a full message = %v, want its %d attributes without the not-before", got, queue.MaxAttributes)
	}
	for n, want := range map[int]bool{0: false, 1: false, 2: true, 10: true} {
		if lambdasqs.StartsOver(n) != want {
			t.Errorf("StartsOver(%d) = %v", n, !want)
		}
	}
}

// On the emulator: a waiting record received for the second time is
// started over by RequeueTo on the real queue. The copy lands on the queue
// with the record's attributes and the not-before, the original is gone,
// and the copy's first receive (count 1) is hidden without processing.
func TestRequeueToOnSQS(t *testing.T) {
	cfg := awstest.Config(t)
	client := sqs.NewFromConfig(cfg)
	name := awstest.Name("lambdasqs-requeue")
	qs, err := awssqs.CreateQueues(t.Context(), client, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq", VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	src, err := awssqs.New(client, awssqs.Options{QueueURL: qs.URL, DLQURL: qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Send(t.Context(), []byte("charge-1"), map[string]string{"traceparent": "00-abc-01"}); err != nil {
		t.Fatal(err)
	}
	receive := func() events.SQSMessage {
		t.Helper()
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(qs.URL), WaitTimeSeconds: 2,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
		}
		m := out.Messages[0]
		ev := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Attributes: m.Attributes, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:" + name, MessageAttributes: map[string]events.SQSMessageAttribute{}}
		for k, v := range m.MessageAttributes {
			ev.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue}
		}
		return ev
	}
	first := receive()
	if _, err := client.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(qs.URL),
		ReceiptHandle: aws.String(first.ReceiptHandle), VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	second := receive()
	if second.Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("second receive: count %q", second.Attributes["ApproximateReceiveCount"])
	}
	until := time.Now().Add(20 * time.Hour).UTC().Truncate(time.Millisecond)
	var ran []string
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet,
		ChangeVisibility: func(ctx context.Context, m events.SQSMessage, d time.Duration) error {
			return src.ChangeVisibility(ctx, lambdasqs.MessageOf(m), d)
		},
		Requeue: lambdasqs.RequeueTo(src, quiet)},
		func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
			ran = append(ran, m.MessageId)
			return lambdasqs.Verdict{Disposition: lambdasqs.Wait, Until: until}
		})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{second}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, %v; want none (started over)", failures(resp), err)
	}
	cp := receive()
	if cp.MessageId == second.MessageId || cp.Body != "charge-1" || cp.Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("copy: %+v", cp)
	}
	nb := aws.ToString(cp.MessageAttributes[queue.NotBeforeAttribute].StringValue)
	if got, err := time.Parse(time.RFC3339Nano, nb); err != nil || !got.Equal(until) || aws.ToString(cp.MessageAttributes["traceparent"].StringValue) != "00-abc-01" {
		t.Fatalf("copy's attributes %v: not-before %q, want %s and the traceparent", cp.MessageAttributes, nb, until)
	}
	// The copy's first receive: not processed, hidden.
	resp, err = h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{cp}})
	if err != nil || strings.Join(failures(resp), ",") != cp.MessageId {
		t.Fatalf("copy: failures %v, %v; want it named (hidden)", failures(resp), err)
	}
	if !slices.Equal(ran, []string{second.MessageId}) {
		t.Errorf("processed %v, want only the original's second receive", ran)
	}
	out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(qs.URL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("after the copy was hidden: %d messages on the queue (%v), want none (the original deleted)", len(out.Messages), err)
	}
	d, err := src.Depth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Waiting != 0 || d.InFlight != 1 {
		t.Errorf("depth %+v, want the hidden copy alone", d)
	}
}
