package awssqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

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

func newSource(t *testing.T, c *sqs.Client, qs awssqs.Queues, url string) *awssqs.Source {
	t.Helper()
	src, err := awssqs.New(c, awssqs.Options{QueueURL: url, DLQURL: qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func receiveAll(t *testing.T, src *awssqs.Source, want int) []consumer.Message {
	t.Helper()
	return awstest.Receive(t, src, want)
}

func TestReceiveBatchesAckDeletesInBatches(t *testing.T) {
	c, qs := newQueues(t, awssqs.QueueSpec{VisibilityTimeout: 30 * time.Second})
	for i := range 15 {
		if _, err := awssqs.Send(t.Context(), c, qs.URL, fmt.Appendf(nil, "body-%d", i), map[string]string{"trace": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	src := newSource(t, c, qs, qs.URL)
	first, err := src.Receive(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 || len(first) > 10 {
		t.Fatalf("first receive returned %d messages", len(first))
	}
	msgs := append(first, receiveAll(t, src, 15-len(first))...)
	for _, m := range msgs {
		if m.ReceiveCount != 1 || m.ID == "" || m.Receipt == "" || m.Attributes["trace"] == "" || m.SentAt.IsZero() {
			t.Fatalf("message = %+v", m)
		}
	}
	if err := src.Ack(t.Context(), msgs[:10]); err != nil {
		t.Fatal(err)
	}
	if err := src.Ack(t.Context(), msgs[10:]); err != nil {
		t.Fatal(err)
	}
	d, err := awssqs.QueueDepth(t.Context(), c, qs.URL)
	if err != nil {
		t.Fatal(err)
	}
	if d.Total() != 0 {
		t.Fatalf("queue depth after acking all = %+v", d)
	}
}

func TestChangeVisibilityRedeliversWithAHigherReceiveCount(t *testing.T) {
	c, qs := newQueues(t, awssqs.QueueSpec{VisibilityTimeout: 30 * time.Second})
	if _, err := awssqs.Send(t.Context(), c, qs.URL, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, c, qs, qs.URL)
	m := receiveAll(t, src, 1)[0]
	if err := src.ChangeVisibility(t.Context(), m, 0); err != nil {
		t.Fatal(err)
	}
	again := receiveAll(t, src, 1)[0]
	if again.ID != m.ID || again.ReceiveCount != 2 || again.Receipt == m.Receipt {
		t.Fatalf("redelivery = %+v, first = %+v", again, m)
	}
}

func TestDeadLetterForwardsBodyReasonAndDeletes(t *testing.T) {
	c, qs := newQueues(t, awssqs.QueueSpec{})
	if _, err := awssqs.Send(t.Context(), c, qs.URL, []byte(`{"bad":true}`), map[string]string{"producer": "billing"}); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, c, qs, qs.URL)
	m := receiveAll(t, src, 1)[0]
	if err := src.DeadLetter(t.Context(), m, "invalid: invalid charge event: chargeId: missing or empty"); err != nil {
		t.Fatal(err)
	}
	dlq := newSource(t, c, qs, qs.DLQURL)
	got := receiveAll(t, dlq, 1)[0]
	if string(got.Body) != `{"bad":true}` {
		t.Fatalf("DLQ body = %q", got.Body)
	}
	want := map[string]string{
		awssqs.ReasonAttribute: "invalid: invalid charge event: chargeId: missing or empty", awssqs.SourceIDAttribute: m.ID,
		awssqs.ReceiveCountAttribute: "1", "producer": "billing",
	}
	for k, v := range want {
		if got.Attributes[k] != v {
			t.Errorf("DLQ attribute %s = %q, want %q", k, got.Attributes[k], v)
		}
	}
	if d, err := awssqs.QueueDepth(t.Context(), c, qs.URL); err != nil || d.Total() != 0 {
		t.Fatalf("main queue after dead-letter: %+v %v", d, err)
	}
}

func TestRedrivePolicyIsTheLastResort(t *testing.T) {
	c, qs := newQueues(t, awssqs.QueueSpec{MaxReceiveCount: 2})
	if _, err := awssqs.Send(t.Context(), c, qs.URL, []byte("poison"), nil); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, c, qs, qs.URL)
	for range 2 {
		m := receiveAll(t, src, 1)[0]
		if err := src.ChangeVisibility(t.Context(), m, 0); err != nil {
			t.Fatal(err)
		}
	}
	if msgs, err := src.Receive(t.Context(), 10); err != nil || len(msgs) != 0 {
		t.Fatalf("third receive: %d messages, err %v; want none (moved to the DLQ)", len(msgs), err)
	}
	got := receiveAll(t, newSource(t, c, qs, qs.DLQURL), 1)[0]
	if string(got.Body) != "poison" {
		t.Fatalf("DLQ holds %q", got.Body)
	}
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
