package queue

import (
	"fmt"
	"time"
)

// CheckWaitWithinQueue says whether a message that waits on its queue can
// outlive the queue's MessageRetentionPeriod (retention) or its redrive
// policy's maxReceiveCount (maxReceives; 0: no redrive policy, no limit)
// before its charge's last attempt is received. waits are the successive
// waits of the longest schedule a charge can have (the advance notice's
// lead, each retry's delay with its jitter, …); a consumer keeps a waiting
// message by hiding it at most hideStep at a time (SQS's 12 hours, less
// what a receive may have used of them), and each hide ends with a
// receive.
//
// resetsAge says whether the consumer starts a waiting message over (a
// copy sent, the original deleted, as serve's runtime and lambdasqs with
// Options.Requeue do): then the message's age and receive count start
// again at every wait, and only one hide and its receive must fit.
// Without it (a consumer that only hides: lambdasqs without Requeue, or on
// a FIFO queue) the message keeps its age and its receive count across
// every wait: the sum of the waits must stay within the retention, and the
// first receive plus one receive per hide within maxReceives, or SQS
// deletes the message by age (the record waits for ever) or moves it to
// the DLQ before its time. That branch is necessary, not sufficient: the
// message's age when its first wait starts (a backlog) is not counted.
//
// It is pure: the caller reads the queue's attributes.
func CheckWaitWithinQueue(waits []time.Duration, retention time.Duration, maxReceives int, hideStep time.Duration, resetsAge bool) error {
	var total time.Duration
	receives := 1 // the receive that starts the first wait
	longest := time.Duration(0)
	for _, w := range waits {
		if w <= 0 {
			continue
		}
		total += w
		longest = max(longest, w)
		if hideStep > 0 {
			receives += int((w + hideStep - 1) / hideStep)
		}
	}
	if total == 0 {
		return nil
	}
	switch {
	case retention <= 0:
		return fmt.Errorf("the queue's message retention %s is not a retention", retention)
	case hideStep <= 0:
		return fmt.Errorf("a hide step of %s keeps nothing waiting", hideStep)
	}
	if resetsAge {
		step := min(longest, hideStep)
		switch {
		case step >= retention:
			return fmt.Errorf("a waiting message is hidden up to %s at a time, and the queue keeps a message %s: it would be deleted by age while hidden; raise the queue's retention above %s", step, retention, step)
		case maxReceives > 0 && maxReceives < 2:
			return fmt.Errorf("the queue's maxReceiveCount %d moves a waiting message to the DLQ at its second receive, before it is started over: raise it to 2 at least", maxReceives)
		}
		return nil
	}
	switch {
	case total >= retention:
		return fmt.Errorf("a charge can wait %s in all on one message (%d wait(s), the message keeping its age), and the queue keeps a message %s (MessageRetentionPeriod): SQS would delete it by age before its last attempt, and its record would wait for ever; raise the retention above %s or shorten the waits", total, countPositive(waits), retention, total)
	case maxReceives > 0 && receives > maxReceives:
		return fmt.Errorf("a charge's longest wait, %s on one message, costs %d receives (one per %s hidden, and the first), and the queue's maxReceiveCount is %d: SQS would move it to the DLQ before its last attempt; raise maxReceiveCount to %d or shorten the waits", total, receives, hideStep, maxReceives, receives)
	}
	return nil
}

func countPositive(ds []time.Duration) int {
	n := 0
	for _, d := range ds {
		if d > 0 {
			n++
		}
	}
	return n
}
