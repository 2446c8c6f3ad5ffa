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

// Redrive implements queue.Queue: each moved message is sent with its body
// and original attributes (the dead-letter ones dropped) and then deleted
// from the DLQ. The others are made visible again when the run ends. It
// stops when the DLQ has nothing new to show.
func (s *Queue) Redrive(ctx context.Context, opts queue.RedriveOptions) (queue.RedriveReport, error) {
	api, dlqURL, queueURL := s.api, s.opts.DLQURL, s.opts.QueueURL
	rep := queue.RedriveReport{DryRun: opts.DryRun}
	seen := map[string]bool{}
	var keep []string // receipts to release at the end
	defer func() {
		for _, r := range keep {
			_, _ = api.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(dlqURL), ReceiptHandle: aws.String(r), VisibilityTimeout: 0,
			})
		}
	}()
	empty := 0
	for empty < 2 {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 300,
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameDeadLetterQueueSourceArn},
		})
		if err != nil {
			return rep, fmt.Errorf("sqs: redrive: receive from the DLQ: %w", err)
		}
		fresh := 0
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				keep = append(keep, aws.ToString(m.ReceiptHandle))
				continue
			}
			seen[id] = true
			fresh++
			attrs := fromAttrs(m.MessageAttributes)
			var at time.Time
			if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
				at = time.UnixMilli(ms)
			}
			e := queue.EntryOf(id, []byte(aws.ToString(m.Body)), attrs, at)
			e.Reason = dlqReason(m, attrs)
			d := opts.Decide(e, rep.Moved)
			if d != queue.Move || opts.DryRun {
				keep = append(keep, aws.ToString(m.ReceiptHandle))
				rep.Count(e, d)
				continue
			}
			in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: m.Body,
				MessageAttributes: toAttrs(queue.OriginalAttributes(attrs))}
			if _, err := api.SendMessage(ctx, in); err != nil {
				keep = append(keep, aws.ToString(m.ReceiptHandle))
				return rep, fmt.Errorf("sqs: redrive %s: send: %w", id, err)
			}
			if _, err := api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				// It is on the main queue now; the DLQ copy stays (safe: the
				// claim makes a second delivery a duplicate).
				return rep, fmt.Errorf("sqs: redrive %s: sent, but delete from the DLQ failed: %w", id, err)
			}
			rep.Count(e, d)
		}
		if fresh == 0 {
			empty++
			if len(out.Messages) == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		} else {
			empty = 0
		}
	}
	return rep, nil
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
