package memqueue_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/queue/queuetest"
)

// The in-memory queue passes the queue conformance suite, so tests that
// use it stand for the real queues.
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{Open: func(t *testing.T, o queuetest.Options) queue.Queue {
		return memqueue.New(memqueue.Options{VisibilityTimeout: o.Visibility, MaxReceiveCount: o.MaxReceiveCount, WaitTime: 50 * time.Millisecond})
	}})
}
