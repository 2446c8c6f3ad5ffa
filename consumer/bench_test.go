package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/memqueue"
)

// BenchmarkRuntimeNoOpHandler is the runtime's own cost per message: receive,
// dispatch, heartbeat setup, batched ack, on the in-memory queue.
func BenchmarkRuntimeNoOpHandler(b *testing.B) {
	q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Minute, WaitTime: 5 * time.Millisecond})
	for range b.N {
		if _, err := q.Send(b.Context(), []byte("x"), nil); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan struct{})
	rt, err := consumer.New(q, consumer.HandlerFunc(func(context.Context, *consumer.Delivery) consumer.Decision {
		return consumer.Decision{Action: consumer.Ack}
	}), consumer.Options{Concurrency: 64, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	go func() { _ = rt.Run(ctx); close(done) }()
	for q.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancel()
	<-done
}
