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
