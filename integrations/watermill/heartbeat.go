package watermillguard

import (
	"context"
	"time"
)

// ticker is the middleware's idempotency.Heartbeat: while the handler runs,
// it calls the guard's beat (which extends the lease) every interval, on a
// context of its own so that a cancelled message does not stop the lease
// from being kept until the handler returns.
type ticker struct {
	ctx   context.Context
	every time.Duration
}

func (t *ticker) Register(beat func(ctx context.Context) error) (unregister func()) {
	ctx, cancel := context.WithCancel(t.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(t.every)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				bctx, bcancel := context.WithTimeout(ctx, t.every)
				_ = beat(bctx) // a transient error: the next beat tries again
				bcancel()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
