package watermillguard_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/finedge/idempotent-consumer/idempotency"
	watermillguard "github.com/finedge/idempotent-consumer/integrations/watermill"
	"github.com/finedge/idempotent-consumer/memstore"
)

// ATTACK W1. Options.HeartbeatInterval is taken as given: an interval
// longer than the guard's lease is not refused (nor capped), so the lease
// runs out before the first beat and a redelivery of the same key (another
// consumer, the broker's redelivery) reclaims it and runs the handler again
// while the first run is still going.
func TestAttackHeartbeatIntervalLongerThanLeaseRunsTwice(t *testing.T) {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: 300 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var running, most, runs atomic.Int32
	h := watermillguard.Middleware(guard, watermillguard.Options{HeartbeatInterval: 2 * time.Second, RetryDelay: -1})(
		func(msg *message.Message) ([]*message.Message, error) {
			runs.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Second) // the effect takes a second
			return nil, nil
		})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 500 * time.Millisecond)
			_, _ = h(newMessage("pay-1", `{"amount":10}`))
		})
	}
	wg.Wait()
	if most.Load() > 1 {
		t.Errorf("HeartbeatInterval 2s with a 300ms lease was accepted: the handler of one key ran %d times, %d at once", runs.Load(), most.Load())
	}
}

// ATTACK W2. A blank key (spaces: what a producer's formatting of a
// missing value gives) is taken as a business key: unrelated messages with
// the same payload share it, and all but the first are acked as duplicates
// without running. The promise: a missing key is permanent, never a shared
// key.
func TestAttackBlankKeyIsShared(t *testing.T) {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Second, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := watermillguard.Middleware(guard, watermillguard.Options{RetryDelay: -1})(
		func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
	for _, key := range []string{" ", " "} {
		_, err := h(newMessage(key, `{"amount":10}`))
		if err != nil && !errors.Is(err, watermillguard.ErrMissingKey) {
			t.Fatalf("key %q: %v", key, err)
		}
		if err == nil {
			continue
		}
	}
	if runs.Load() > 0 {
		t.Errorf("a blank key was used as a business key (the handler ran %d times; the second message was acked as a duplicate of an unrelated one): want ErrMissingKey", runs.Load())
	}
}

// ATTACK W3. With every default (lease 60s + skew 2s, RetryDelay 1s) a
// handler's transient error keeps the claim for the rest of the lease, and
// each redelivery meanwhile is nacked after 1s as "in progress": ~62
// deliveries before the handler may run again. A broker with a delivery
// limit (RabbitMQ 4 quorum queues: delivery-limit 20 by default; JetStream
// MaxDeliver; SQS maxReceiveCount) drops or dead-letters the message long
// before: its effect never happens. Here a broker that requeues at once
// and gives up after 20 deliveries (RabbitMQ's default); ~20s.
func TestAttackInProgressNacksExhaustTheDeliveryLimit(t *testing.T) {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var runs, done atomic.Int32
	h := watermillguard.Middleware(guard, watermillguard.Options{})(
		func(*message.Message) ([]*message.Message, error) {
			if runs.Add(1) == 1 {
				return nil, errors.New("connection reset by peer") // transient, before any effect
			}
			done.Add(1)
			return nil, nil
		})
	const deliveryLimit = 20
	deliveries := 0
	for deliveries < deliveryLimit {
		deliveries++
		if _, err := h(newMessage("pay-1", `{"amount":10}`)); err == nil {
			break
		}
	}
	if done.Load() == 0 {
		t.Errorf("after %d deliveries (the broker's limit) the handler ran %d time(s) and the effect never happened: each redelivery was nacked as in progress under the lease our own failed attempt kept; the message is dropped", deliveries, runs.Load())
	}
}
