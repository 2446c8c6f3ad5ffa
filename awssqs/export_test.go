package awssqs

import (
	"context"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// RedriveHolding is Redrive with a scan that holds what it receives for
// hold and waits at most wait for what another reader holds (tests of an
// incomplete scan, without waiting a minute).
func (s *Queue) RedriveHolding(ctx context.Context, hold, wait time.Duration, o queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.Redrive(ctx, s.newDLQScan(hold, wait), o)
}
