package awssqs_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
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
