package awssqs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/queue"
)

// Redrive implements queue.Queue (queue.Redrive over the DLQ): each moved
// message is sent with its body and original attributes and then deleted
// from the DLQ; the others are made visible again when the run ends. It
// stops when the DLQ has nothing new to show.
func (s *Queue) Redrive(ctx context.Context, opts queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.Redrive(ctx, &dlqScan{q: s, seen: map[string]bool{}, receipts: map[string]string{}}, opts)
}

// dlqScan receives the DLQ (each message hidden for 5 minutes) until two
// receives in a row bring nothing it has not seen.
type dlqScan struct {
	q        *Queue
	seen     map[string]bool
	receipts map[string]string // message id → receipt, for the ones not moved
	keep     []string          // receipts of repeats, released at Close
	ctx      context.Context   // for Close
}

func (s *dlqScan) Next(ctx context.Context) ([]queue.DLQEntry, error) {
	s.ctx = ctx
	for empty := 0; empty < 2; {
		out, err := s.q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(s.q.opts.DLQURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 300,
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameDeadLetterQueueSourceArn},
		})
		if err != nil {
			return nil, fmt.Errorf("sqs: redrive: receive from the DLQ: %w", err)
		}
		var page []queue.DLQEntry
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if s.seen[id] {
				s.keep = append(s.keep, aws.ToString(m.ReceiptHandle))
				continue
			}
			s.seen[id] = true
			s.receipts[id] = aws.ToString(m.ReceiptHandle)
			attrs := fromAttrs(m.MessageAttributes)
			var at time.Time
			if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
				at = time.UnixMilli(ms)
			}
			e := queue.EntryOf(id, []byte(aws.ToString(m.Body)), attrs, at)
			e.Reason = dlqReason(m, attrs)
			page = append(page, e)
		}
		if len(page) > 0 {
			return page, nil
		}
		empty++
		if len(out.Messages) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil, nil
}

func (s *dlqScan) MoveBack(ctx context.Context, e queue.DLQEntry, attrs map[string]string) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(s.q.opts.QueueURL), MessageBody: aws.String(string(e.Body)),
		MessageAttributes: toAttrs(attrs)}
	if _, err := s.q.api.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("sqs: redrive %s: send: %w", e.ID, err)
	}
	receipt := s.receipts[e.ID]
	delete(s.receipts, e.ID)
	if _, err := s.q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(s.q.opts.DLQURL), ReceiptHandle: aws.String(receipt)}); err != nil {
		// It is on the main queue now; the DLQ copy stays (safe: the
		// claim makes a second delivery a duplicate).
		return fmt.Errorf("sqs: redrive %s: sent, but delete from the DLQ failed: %w", e.ID, err)
	}
	return nil
}

// Close makes every message received and not moved visible again.
func (s *dlqScan) Close() {
	ctx := context.Background()
	if s.ctx != nil {
		ctx = context.WithoutCancel(s.ctx)
	}
	release := s.keep
	for _, r := range s.receipts {
		release = append(release, r)
	}
	for _, r := range release {
		_, _ = s.q.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(s.q.opts.DLQURL), ReceiptHandle: aws.String(r), VisibilityTimeout: 0,
		})
	}
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
