package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// acker batches deletes: it sends a batch when AckBatchSize acks are
// waiting or the oldest has waited AckFlushInterval, and everything left
// when closed.
type acker struct {
	r  *Runtime
	in chan Message
}

func newAcker(r *Runtime) *acker {
	return &acker{r: r, in: make(chan Message, r.opts.Concurrency*2)}
}

func (a *acker) add(m Message) { a.in <- m }

// close is called after every handler has returned; run then flushes.
func (a *acker) close() { close(a.in) }

func (a *acker) run(work context.Context) {
	size := a.r.opts.AckBatchSize
	batch := make([]Message, 0, size)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		a.send(work, batch)
		batch = batch[:0]
	}
	for {
		select {
		case m, ok := <-a.in:
			if !ok {
				flush()
				return
			}
			if len(batch) == 0 {
				timer.Reset(a.r.opts.AckFlushInterval)
			}
			batch = append(batch, m)
			if len(batch) == size {
				timer.Stop()
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

func (a *acker) send(work context.Context, batch []Message) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(work), a.r.opts.OpTimeout)
	defer cancel()
	msgs := append([]Message(nil), batch...)
	err := a.r.src.Ack(ctx, msgs)
	failed := 0
	var be *queue.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be):
		failed = len(be.Failed)
	default:
		failed = len(msgs)
	}
	if failed > 0 {
		a.r.stats.ackErrors.Add(int64(failed))
		a.r.opts.Logger.Warn("ack failed; those messages will be redelivered and dropped as duplicates",
			"failed", failed, "batch", len(msgs), "error", err)
	}
	a.r.stats.acked.Add(int64(len(msgs) - failed))
}
