// Package awssqs is the consumer.Source on Amazon SQS (standard queues):
// long-polling receives of up to 10 messages, batched deletes, visibility
// changes for the heartbeat and for retries, and a dead-letter forward that
// sends the original body and attributes plus the reason to the DLQ and then
// deletes the original. A redrive policy on the main queue (see
// CreateQueues) stays the last resort for messages that keep failing.
package awssqs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/consumer"
)

// API is the part of the SQS client the source uses.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Attributes the dead-letter forward adds to the copy it sends.
const (
	ReasonAttribute       = "dlq-reason"
	SourceIDAttribute     = "dlq-source-message-id"
	ReceiveCountAttribute = "dlq-receive-count"
)

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

// maxReasonBytes bounds the reason attribute.
const maxReasonBytes = 1024

// Options configure a Source.
type Options struct {
	// QueueURL is the queue consumed. Required.
	QueueURL string
	// DLQURL is where DeadLetter forwards. Required.
	DLQURL string
	// WaitTime is the long-poll wait per receive (0-20s). Default 20s.
	WaitTime time.Duration
	// VisibilityTimeout, when set, overrides the queue's visibility timeout
	// on each receive. Default: the queue's own.
	VisibilityTimeout time.Duration
}

// Source implements consumer.Source.
type Source struct {
	api  API
	opts Options
}

var _ consumer.Source = (*Source)(nil)

// New returns a Source.
func New(api API, opts Options) (*Source, error) {
	if api == nil || opts.QueueURL == "" || opts.DLQURL == "" {
		return nil, errors.New("sqs: New needs a client, QueueURL and DLQURL")
	}
	if opts.WaitTime < 0 || opts.WaitTime > 20*time.Second {
		return nil, fmt.Errorf("sqs: WaitTime %s is outside 0-20s", opts.WaitTime)
	}
	if opts.VisibilityTimeout < 0 || opts.VisibilityTimeout > consumer.MaxVisibility {
		return nil, fmt.Errorf("sqs: VisibilityTimeout %s is outside 0-12h", opts.VisibilityTimeout)
	}
	if opts.WaitTime == 0 {
		opts.WaitTime = 20 * time.Second
	}
	return &Source{api: api, opts: opts}, nil
}

// seconds rounds d up to whole seconds within SQS's visibility range.
func seconds(d time.Duration) int32 {
	s := math.Ceil(d.Seconds())
	return int32(min(max(s, 0), consumer.MaxVisibility.Seconds()))
}

// Receive implements consumer.Source.
func (s *Source) Receive(ctx context.Context, max int) ([]consumer.Message, error) {
	if max < 1 || max > 10 {
		return nil, fmt.Errorf("sqs: receive of %d messages (1-10)", max)
	}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.opts.QueueURL),
		MaxNumberOfMessages:         int32(max),
		WaitTimeSeconds:             seconds(s.opts.WaitTime),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameSentTimestamp},
	}
	if s.opts.VisibilityTimeout > 0 {
		in.VisibilityTimeout = seconds(s.opts.VisibilityTimeout)
	}
	out, err := s.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("sqs: receive: %w", err)
	}
	msgs := make([]consumer.Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		cm := consumer.Message{
			ID:      aws.ToString(m.MessageId),
			Body:    []byte(aws.ToString(m.Body)),
			Receipt: aws.ToString(m.ReceiptHandle),
		}
		if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
			cm.ReceiveCount = n
		}
		if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
			cm.SentAt = time.UnixMilli(ms).UTC()
		}
		if len(m.MessageAttributes) > 0 {
			cm.Attributes = make(map[string]string, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				if v.StringValue != nil {
					cm.Attributes[k] = *v.StringValue
				}
			}
		}
		msgs = append(msgs, cm)
	}
	return msgs, nil
}

// Ack implements consumer.Source with one DeleteMessageBatch.
func (s *Source) Ack(ctx context.Context, msgs []consumer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) > 10 {
		return fmt.Errorf("sqs: ack of %d messages (at most 10)", len(msgs))
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.Receipt)}
	}
	out, err := s.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.opts.QueueURL), Entries: entries})
	if err != nil {
		return fmt.Errorf("sqs: delete batch: %w", err)
	}
	if len(out.Failed) == 0 {
		return nil
	}
	failed := make(map[string]error, len(out.Failed))
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(msgs) {
			continue
		}
		failed[msgs[i].ID] = fmt.Errorf("sqs: delete: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
	}
	return &consumer.BatchError{Failed: failed}
}

// ChangeVisibility implements consumer.Source (d is rounded up to seconds).
func (s *Source) ChangeVisibility(ctx context.Context, m consumer.Message, d time.Duration) error {
	_, err := s.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.opts.QueueURL), ReceiptHandle: aws.String(m.Receipt), VisibilityTimeout: seconds(d),
	})
	if err != nil {
		return fmt.Errorf("sqs: change visibility of %s: %w", m.ID, err)
	}
	return nil
}

// DeadLetter implements consumer.Source: send to the DLQ, then delete. If
// the delete fails after the send, the message is delivered again and may
// be forwarded twice; the DLQ copy carries the source message id to tell.
func (s *Source) DeadLetter(ctx context.Context, m consumer.Message, reason string) error {
	attrs := map[string]types.MessageAttributeValue{
		ReasonAttribute:       strAttr(truncate(reason, maxReasonBytes)),
		SourceIDAttribute:     strAttr(m.ID),
		ReceiveCountAttribute: {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(m.ReceiveCount))},
	}
	for k, v := range m.Attributes {
		if len(attrs) == maxAttributes {
			break
		}
		if _, ours := attrs[k]; !ours && v != "" {
			attrs[k] = strAttr(v)
		}
	}
	if _, err := s.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(s.opts.DLQURL), MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs,
	}); err != nil {
		return fmt.Errorf("sqs: forward %s to the DLQ: %w", m.ID, err)
	}
	if _, err := s.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl: aws.String(s.opts.QueueURL), ReceiptHandle: aws.String(m.Receipt),
	}); err != nil {
		return fmt.Errorf("sqs: delete %s after forwarding it to the DLQ: %w", m.ID, err)
	}
	return nil
}

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Send puts body on queueURL with string attributes and returns the
// message id (the `send` command, tests).
func Send(ctx context.Context, api API, queueURL string, body []byte, attrs map[string]string) (string, error) {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(body))}
	if len(attrs) > 0 {
		in.MessageAttributes = make(map[string]types.MessageAttributeValue, len(attrs))
		for k, v := range attrs {
			in.MessageAttributes[k] = strAttr(v)
		}
	}
	out, err := api.SendMessage(ctx, in)
	if err != nil {
		return "", fmt.Errorf("sqs: send: %w", err)
	}
	return aws.ToString(out.MessageId), nil
}

// SendBatch puts up to 10 bodies on queueURL with one SendMessageBatch.
func SendBatch(ctx context.Context, api interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}, queueURL string, bodies [][]byte) error {
	if len(bodies) == 0 || len(bodies) > 10 {
		return fmt.Errorf("sqs: send batch of %d (1-10)", len(bodies))
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
	for i, b := range bodies {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(b))}
	}
	out, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
	if err != nil {
		return fmt.Errorf("sqs: send batch: %w", err)
	}
	if len(out.Failed) > 0 {
		f := out.Failed[0]
		return fmt.Errorf("sqs: send batch: %d failed, e.g. %s: %s", len(out.Failed), aws.ToString(f.Code), aws.ToString(f.Message))
	}
	return nil
}
