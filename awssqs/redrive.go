package awssqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/queue"
)

// DLQHold is how long a DLQ scan (a listing, a show, a redrive, status)
// holds each message it received invisible to other readers. It holds
// them only so that its next receive brings others (a receive returns at
// most 10), extends the hold while it runs, and gives every message it
// did not move back (visibility 0) when it ends, however it ends: no
// reader ever waits out a long hold left behind.
const DLQHold = 30 * time.Second

// DLQWait bounds how long a scan that has seen fewer messages than the
// DLQ holds waits for the ones another reader holds to come back.
const DLQWait = 2 * DLQHold

// Redrive implements queue.Queue (queue.Redrive over the DLQ): each moved
// message is sent with its body and original attributes and then deleted
// from the DLQ; the others are made visible again when the run ends.
//
// It receives until it has seen as many messages as the DLQ held when it
// started (ApproximateNumberOfMessages + ApproximateNumberOfMessagesNotVisible,
// less what others deleted meanwhile). Short of that, because another
// reader holds some, it gives back what it holds (so that reader can
// finish too) and keeps receiving for up to DLQWait; a scan still short
// then ends with the report's Unseen set (an approximate count: SQS's
// counts are).
//
// SQS's StartMessageMoveTask could move the whole DLQ back in bulk on the
// server; the emulator the tests run on lacks it, and a redrive selects
// by reason and charge, so every redrive goes through this receive path.
func (s *Queue) Redrive(ctx context.Context, opts queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.Redrive(ctx, s.newDLQScan(DLQHold, DLQWait), opts)
}

func (s *Queue) newDLQScan(hold, wait time.Duration) *dlqScan {
	return &dlqScan{q: s, hold: hold, wait: wait, seen: map[string]bool{}, held: map[string]string{}}
}

// dlqScan receives the DLQ, each message hidden for hold, until it has
// seen as many as the DLQ holds (or waited wait for the rest).
type dlqScan struct {
	q          *Queue
	hold, wait time.Duration
	ctx        context.Context // the last Next's, for Close (without its cancel)

	started    bool
	expected   int // the DLQ's size at the start (approximate)
	done       bool
	seen       map[string]bool
	held       map[string]string // message id → latest receipt, for every message held invisible
	heldSince  time.Time         // when the oldest hold in held was set or last extended
	moved      int
	shortSince time.Time // when the scan first ran dry short of expected
	unseen     int
}

var _ queue.PartialScan = (*dlqScan)(nil)

// receiveTimeout bounds a receive: one long poll of a second and the
// SDK's retries.
const receiveTimeout = 15 * time.Second

func (s *dlqScan) Next(ctx context.Context) ([]queue.DLQEntry, error) {
	s.ctx = ctx
	if !s.started {
		n, err := s.size(ctx)
		if err != nil {
			return nil, err
		}
		s.started, s.expected = true, n
	}
	for !s.done {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sqs: redrive: %w", err)
		}
		if err := s.extend(ctx); err != nil {
			return nil, err
		}
		msgs, err := s.receive(ctx)
		if err != nil {
			return nil, err
		}
		var page []queue.DLQEntry
		for _, m := range msgs {
			id := aws.ToString(m.MessageId)
			if len(s.held) == 0 {
				s.heldSince = time.Now()
			}
			s.held[id] = aws.ToString(m.ReceiptHandle)
			if s.seen[id] {
				continue // held again all the same: the next receive brings others
			}
			s.seen[id] = true
			attrs := fromAttrs(m.MessageAttributes)
			var at time.Time
			if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
				at = time.UnixMilli(ms)
			}
			e := queue.EntryOf(id, []byte(aws.ToString(m.Body)), attrs, at)
			e.Reason = dlqReason(m, attrs)
			page = append(page, e)
		}
		if err := ctx.Err(); err != nil {
			// Received (and held) before ctx ended: Close gives it back.
			return nil, fmt.Errorf("sqs: redrive: %w", err)
		}
		if len(page) > 0 {
			return page, nil
		}
		if len(msgs) > 0 {
			continue // only messages seen before, now held: receive on
		}
		if err := s.runDry(ctx); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// runDry decides what an empty receive means: the scan is done (it has
// seen what the DLQ holds, less what others deleted meanwhile), or short
// because another reader holds the rest. Short, it gives back what it
// holds (a reader waiting for those can finish, and then gives its own
// back) and waits a moment; short for longer than wait (or near ctx's
// deadline), it ends with unseen set.
func (s *dlqScan) runDry(ctx context.Context) error {
	n, err := s.size(ctx)
	if err != nil {
		return err
	}
	// What the DLQ held at the start (or since: a count at the start can
	// miss what another reader was giving back), less what was deleted
	// since (by us: moved; by others: gone from the count).
	s.expected = max(s.expected, n)
	want := min(s.expected, n+s.moved)
	short := want - len(s.seen)
	if short <= 0 {
		s.done = true
		return nil
	}
	now := time.Now()
	if s.shortSince.IsZero() {
		s.shortSince = now
	}
	// Short for longer than wait, or too near ctx's deadline for another
	// round (a pause and a receive): incomplete, and saying so beats an
	// error for the whole read.
	dl, hasDeadline := ctx.Deadline()
	if now.Sub(s.shortSince) >= s.wait || hasDeadline && dl.Sub(now) < 3*time.Second {
		s.done, s.unseen = true, short
		return nil
	}
	s.release(ctx)
	// A random pause, so that two readers giving back at once do not take
	// their own messages again in step.
	pause := time.Duration(200+rand.N(800)) * time.Millisecond
	select {
	case <-ctx.Done():
		return fmt.Errorf("sqs: redrive: %w", ctx.Err())
	case <-time.After(pause):
		return nil
	}
}

// size is how many messages the DLQ holds, visible or not: the larger of
// two reads a moment apart. Each is approximate (on SQS by design; on the
// emulator a read taken while another reader gives messages back can miss
// them: visible and not visible are counted one after the other).
func (s *dlqScan) size(ctx context.Context) (int, error) {
	n := 0
	for i := range 2 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("sqs: redrive: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		d, err := counts(ctx, s.q.api, s.q.opts.DLQURL)
		if err != nil {
			return 0, fmt.Errorf("sqs: redrive: count the DLQ: %w", err)
		}
		n = max(n, d.Visible+d.InFlight)
	}
	return n, nil
}

// Unseen implements queue.PartialScan: how many DLQ messages the scan
// could not see, by SQS's approximate counts.
func (s *dlqScan) Unseen() (int, bool) { return s.unseen, true }

// receive is one receive from the DLQ, hiding what it brings for hold. A
// cancelled ctx does not cut it short: the messages of a receive cut
// short are hidden for hold with no receipt to give them back by.
func (s *dlqScan) receive(ctx context.Context) ([]types.Message, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiveTimeout)
	defer cancel()
	out, err := s.q.api.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(s.q.opts.DLQURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: seconds(s.hold),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameDeadLetterQueueSourceArn},
	})
	if err != nil {
		return nil, fmt.Errorf("sqs: redrive: receive from the DLQ: %w", err)
	}
	return out.Messages, nil
}

// extend renews the hold of everything held once half of it has passed
// (a long scan, or a slow caller between pages).
func (s *dlqScan) extend(ctx context.Context) error {
	if len(s.held) == 0 || time.Since(s.heldSince) < s.hold/2 {
		return nil
	}
	if err := s.changeVisibility(ctx, seconds(s.hold)); err != nil {
		return fmt.Errorf("sqs: redrive: extend the hold on the DLQ: %w", err)
	}
	s.heldSince = time.Now()
	return nil
}

// release makes every message held visible again, even when ctx has
// ended. A failure leaves the messages to come back when their hold ends.
func (s *dlqScan) release(ctx context.Context) {
	if len(s.held) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = s.changeVisibility(ctx, 0)
	clear(s.held)
}

// changeVisibility sets the visibility of everything held, ten at a time.
// An entry that fails (deleted meanwhile by another redrive) is left.
func (s *dlqScan) changeVisibility(ctx context.Context, secs int32) error {
	var batch []types.ChangeMessageVisibilityBatchRequestEntry
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := s.q.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(s.q.opts.DLQURL), Entries: batch,
		})
		batch = batch[:0]
		return err
	}
	var first error
	for _, r := range s.held {
		batch = append(batch, types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(len(batch))), ReceiptHandle: aws.String(r), VisibilityTimeout: secs,
		})
		if len(batch) == 10 {
			if err := flush(); err != nil && first == nil {
				first = err
			}
		}
	}
	if err := flush(); err != nil && first == nil {
		first = err
	}
	return first
}

// MoveBack sends e to the queue and deletes it from the DLQ, only while
// the scan surely still holds it: a hold that may have lapsed (a slow
// page: the caller's decisions, throttled sends) leaves e, and every other
// entry held with it, to whoever may hold them now — another redrive
// could be moving them, and moving them here too would put one entry on
// the queue twice. Those are ErrGone: not moved, for the next run.
func (s *dlqScan) MoveBack(ctx context.Context, e queue.DLQEntry, attrs map[string]string) error {
	if len(s.held) > 0 && time.Since(s.heldSince) >= s.hold*3/4 {
		clear(s.held)
	}
	receipt, ok := s.held[e.ID]
	if !ok {
		return fmt.Errorf("sqs: redrive %s: not moved: this run's hold on it may have lapsed (the run was slow), so another reader may hold it; run the redrive again: %w", e.ID, queue.ErrGone)
	}
	if err := s.extend(ctx); err != nil {
		return err
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(s.q.opts.QueueURL), MessageBody: aws.String(string(e.Body)),
		MessageAttributes: toAttrs(attrs)}
	if _, err := s.q.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("sqs: redrive %s: send: %w", e.ID, err)
	}
	delete(s.held, e.ID)
	s.moved++
	if _, err := s.q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.q.opts.DLQURL), ReceiptHandle: aws.String(receipt)}); err != nil {
		// It is on the main queue now; the DLQ copy stays (safe: the
		// claim makes a second delivery a duplicate) and comes back
		// when its hold ends.
		return fmt.Errorf("sqs: redrive %s: %w: %w", e.ID, queue.ErrSentNotDeleted, err)
	}
	return nil
}

// Close makes every message received and not moved visible again, also
// when the scan's context has ended.
func (s *dlqScan) Close() {
	ctx := context.Background()
	if s.ctx != nil {
		ctx = s.ctx
	}
	s.release(ctx)
}

// dlqReason is why m is on the DLQ. SQS marks a message its redrive policy
// moved with the system attribute DeadLetterQueueSourceArn, which nobody
// can set: such a message was received too often, whatever dead-letter
// attributes it carries (a producer's, which Send refuses only for our own
// producers, or an older reason of ours brought back by a console
// redrive). Only a message we sent to the DLQ ourselves has its reason in
// its attributes.
func dlqReason(m types.Message, attrs map[string]string) queue.Reason {
	if src := m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)]; src != "" {
		return queue.Reason{Code: queue.CodeMaxReceives, Detail: "moved by the queue's redrive policy after too many receives"}
	}
	return queue.ReasonFromAttributes(attrs)
}
