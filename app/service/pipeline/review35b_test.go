package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// hangingBound is a store that does not answer (a network black hole, a
// lock wait): its Finish returns only when the call's deadline passes, and
// wraps that as unavailable, as every real store does.
type hangingBound struct{ driver.Bound }

func (hangingBound) Finish(ctx context.Context, _ driver.FinishRequest) error {
	<-ctx.Done()
	return driver.Unavailable("finish", ctx.Err())
}

// REVIEW 35b: call() now abandons every failed call whose ctx has ended
// before it tests ErrUnavailable. But a store call's ctx ends by itself on
// a timeout: idempotency's record() runs each Finish under
// context.WithTimeout(FinishTimeout) (idempotency/do.go:202). A store
// that hangs fails every call by that deadline, and every such failure is
// abandoned: the store circuit never opens, receiving is never paused,
// and the store alert never fires, however long the store hangs.
func TestReview35bAHangingStoreNeverOpensTheCircuit(t *testing.T) {
	br := storeBreaker(t, circuit.Options{Threshold: 3})
	g := gatedBound{Bound: hangingBound{}, br: br}
	for range 10 {
		// As record() does: a bounded attempt on a ctx the caller's
		// cancellation does not reach.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 5*time.Millisecond)
		err := g.Finish(fctx, driver.FinishRequest{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("finish: %v", err)
		}
	}
	if s := br.Status(); s.State != circuit.Open {
		t.Fatalf("after 10 timed-out store calls (threshold 3): circuit %v, %d failures counted; want open", s.State, s.Failures)
	}
}
