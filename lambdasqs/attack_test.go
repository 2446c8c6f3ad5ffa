package lambdasqs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// ATTACK 1. A FIFO batch [a: permanent, b: ok] with a DeadLetter that
// fails: a is turned into a retry only after the loop, when b has already
// run and is deleted. The message group's order is broken: b's effect
// happened before a, and a comes back alone. The package promises that
// "once one is to be retried every later record of the batch is named too".
func TestAttackFIFODeadLetterFailureBreaksOrder(t *testing.T) {
	var ran []string
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet,
		DeadLetter: func(context.Context, events.SQSMessage, queue.Reason) error { return errors.New("DLQ unavailable") },
	}, func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
		ran = append(ran, m.MessageId)
		if m.Body == "bad" {
			return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: queue.Reason{Code: "invalid"}}
		}
		return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := "arn:aws:sqs:us-east-1:123456789012:charges.fifo"
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "a", Body: "bad", EventSourceARN: arn}, {MessageId: "b", Body: "ok", EventSourceARN: arn}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(failures(resp), ","); got != "a,b" {
		t.Errorf("FIFO: a could not be dead-lettered and is retried, but failures = %q (b ran: %v and is deleted before a): want a,b", got, ran)
	}
}

// ATTACK 2. DeadLetter runs on context.WithoutCancel with 10s per record,
// after the work's deadline, sequentially. With the default Margin (2s) a
// DLQ that hangs holds the invocation past its deadline: Lambda times it
// out, the response is lost and the whole batch comes back — exactly what
// the comment in handle says the bound prevents.
func TestAttackDeadLetterOverrunsTheInvocationDeadline(t *testing.T) {
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: 100 * time.Millisecond, Lease: time.Minute, Logger: quiet,
		DeadLetter: func(ctx context.Context, _ events.SQSMessage, _ queue.Reason) error {
			<-ctx.Done() // a DLQ that hangs
			return ctx.Err()
		},
	}, func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
		return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: queue.Reason{Code: "invalid"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second) // MinWork + Margin + a little
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	_, _ = h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "x"}}})
	if over := time.Since(deadline); over > 0 {
		t.Errorf("the handler answered %s after the invocation's deadline (Lambda would have timed it out; the whole batch comes back)", over.Round(time.Millisecond))
	}
}

// ATTACK 3. WholeBatchOnFailure with DeadLetter: a permanent record is sent
// to the DLQ, then the batch fails as a whole because another record is to
// be retried: the dead-lettered record comes back and is dead-lettered
// again (once per receive: N copies on the DLQ).
func TestAttackWholeBatchDeadLettersTwice(t *testing.T) {
	var sent atomic.Int32
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, WholeBatchOnFailure: true,
		DeadLetter: func(context.Context, events.SQSMessage, queue.Reason) error { sent.Add(1); return nil },
	}, func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
		if m.Body == "bad" {
			return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: queue.Reason{Code: "invalid"}}
		}
		return lambdasqs.Verdict{Disposition: lambdasqs.Retry}
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "p", Body: "bad"}, {MessageId: "r", Body: "busy"}}}
	for range 2 { // the whole batch failed: Lambda delivers it again
		if _, err := h(t.Context(), ev); err == nil {
			t.Fatal("want the whole batch to fail")
		}
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("the permanent record was dead-lettered %d times (the whole batch failed after it was sent, so it came back): want 1", n)
	}
}

// failExtend is a store whose lease extensions fail (throttled, partitioned
// for writes to this item) while claims still work.
type failExtend struct{ driver.Store }

func (failExtend) Extend(context.Context, driver.ExtendRequest) error {
	return errors.New("ProvisionedThroughputExceededException")
}

// ATTACK 4. The package says the lease (≥ MinWork) alone covers the work
// even if every heartbeat fails. But the work's context is bounded by the
// invocation's deadline (- Margin), never by MinWork: a work that honours
// its context but takes longer than MinWork outlives the lease, and a
// second invocation reclaims the key and runs it again while the first
// still runs.
func TestAttackWorkLongerThanMinWorkRunsTwice(t *testing.T) {
	store := failExtend{memstore.New()}
	guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: 300 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var running, maxRunning, runs atomic.Int32
	work := func(ctx context.Context, _ events.SQSMessage) error {
		runs.Add(1)
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		defer running.Add(-1)
		select { // a bank call that takes 1s, cancelled only by ctx
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: 300 * time.Millisecond, Margin: 100 * time.Millisecond, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) { return m.Body, nil }}, work)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "charge-1"}}}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 500 * time.Millisecond) // the second invocation, after the lease
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = h(ctx, ev)
		})
	}
	wg.Wait()
	if maxRunning.Load() > 1 {
		t.Errorf("the work of one key ran %d times, %d at once: the work's context is not bounded by MinWork, so it outlived the lease", runs.Load(), maxRunning.Load())
	}
}

// hangExtend is a store whose lease extensions hang until their context
// ends (a slow store).
type hangExtend struct{ driver.Store }

func (hangExtend) Extend(ctx context.Context, _ driver.ExtendRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

// ATTACK 5. When the work ends, the record's heartbeat is stopped and
// stop() waits for a beat in flight, which is bounded only by Lease/3 (on
// a context the deadline does not reach). A work that fits its MinWork
// within the deadline is then answered after the deadline: Lambda times the
// invocation out and the whole batch comes back.
func TestAttackHeartbeatStopWaitsPastTheDeadline(t *testing.T) {
	guard, err := idempotency.NewGuard(hangExtend{memstore.New()}, idempotency.Options{Lease: 3 * time.Second, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: 1200 * time.Millisecond, Margin: 300 * time.Millisecond, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) { return m.Body, nil }},
		func(ctx context.Context, _ events.SQSMessage) error {
			time.Sleep(1100 * time.Millisecond) // within MinWork
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(1600 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "charge-1"}}})
	if over := time.Since(deadline); over > 0 {
		t.Errorf("answered %s after the invocation's deadline (failures %v, err %v): a hung beat holds the record past the deadline", over.Round(time.Millisecond), failures(resp), err)
	}
}

// ATTACK 6. Handler refuses an empty key but takes a blank one (spaces, a
// message attribute formatted from a missing value): unrelated records with
// the same body share it, and the second is deleted as a duplicate without
// running. The promise: no key is a permanent failure, never a shared key.
func TestAttackBlankKeyIsShared(t *testing.T) {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: time.Second, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) {
			if a, ok := m.MessageAttributes["key"]; ok && a.StringValue != nil {
				return *a.StringValue, nil
			}
			return "", nil
		}},
		func(context.Context, events.SQSMessage) error { runs.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	blank := " "
	attrs := map[string]events.SQSMessageAttribute{"key": {StringValue: &blank, DataType: "String"}}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "a", Body: `{"refund":10}`, MessageAttributes: attrs},
		{MessageId: "b", Body: `{"refund":10}`, MessageAttributes: attrs}}})
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() > 0 {
		t.Errorf("a blank key was claimed as a key: the work ran %d time(s), failures %v (b deleted as a duplicate of an unrelated a): want both permanent no_key", runs.Load(), failures(resp))
	}
}
