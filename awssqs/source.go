// Package awssqs is the queue.Queue on Amazon SQS (standard queues):
// long-polling receives of up to 10 messages, batched deletes, visibility
// changes for the heartbeat and for retries, and a dead-letter forward that
// sends the original body and attributes plus the reason to the DLQ and then
// deletes the original. A redrive policy on the main queue (see
// CreateQueues) stays the last resort for messages that keep failing.
package awssqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/queue"
)

// API is the part of the SQS client the queue uses.
type API interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ API = (*sqs.Client)(nil)

// AWSTraceHeaderAttribute is where a received message's X-Ray trace
// header (an SQS system attribute) is put among its attributes.
const AWSTraceHeaderAttribute = "AWSTraceHeader"

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = queue.MaxAttributes

// Options configure a Queue.
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

// Queue implements queue.Queue on an SQS queue and its DLQ.
type Queue struct {
	api  API
	opts Options
}

var _ queue.Queue = (*Queue)(nil)

// New returns a Queue.
func New(api API, opts Options) (*Queue, error) {
	if api == nil || opts.QueueURL == "" || opts.DLQURL == "" {
		return nil, errors.New("sqs: New needs a client, QueueURL and DLQURL")
	}
	if opts.WaitTime < 0 || opts.WaitTime > 20*time.Second {
		return nil, fmt.Errorf("sqs: WaitTime %s is outside 0-20s", opts.WaitTime)
	}
	if opts.VisibilityTimeout < 0 || opts.VisibilityTimeout > queue.MaxVisibility {
		return nil, fmt.Errorf("sqs: VisibilityTimeout %s is outside 0-12h", opts.VisibilityTimeout)
	}
	if opts.WaitTime == 0 {
		opts.WaitTime = 20 * time.Second
	}
	return &Queue{api: api, opts: opts}, nil
}

// seconds rounds d up to whole seconds within SQS's visibility range.
func seconds(d time.Duration) int32 {
	s := math.Ceil(d.Seconds())
	return int32(min(max(s, 0), queue.MaxVisibility.Seconds()))
}

// Receive implements queue.Queue.
func (s *Queue) Receive(ctx context.Context, max int) ([]queue.Message, error) {
	if max < 1 || max > 10 {
		return nil, fmt.Errorf("sqs: receive of %d messages (1-10)", max)
	}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:              aws.String(s.opts.QueueURL),
		MaxNumberOfMessages:   int32(max),
		WaitTimeSeconds:       seconds(s.opts.WaitTime),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameAWSTraceHeader},
	}
	if s.opts.VisibilityTimeout > 0 {
		in.VisibilityTimeout = seconds(s.opts.VisibilityTimeout)
	}
	out, err := s.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("sqs: receive: %w", err)
	}
	msgs := make([]queue.Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		cm := queue.Message{
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
		cm.Attributes = fromAttrs(m.MessageAttributes)
		if th := m.Attributes[string(types.MessageSystemAttributeNameAWSTraceHeader)]; th != "" {
			// X-Ray's trace header is a system attribute; the tracing
			// package reads it from the message's attributes.
			if cm.Attributes == nil {
				cm.Attributes = map[string]string{}
			}
			cm.Attributes[AWSTraceHeaderAttribute] = th
		}
		msgs = append(msgs, cm)
	}
	return msgs, nil
}

// Ack implements queue.Queue with one DeleteMessageBatch.
func (s *Queue) Ack(ctx context.Context, msgs []queue.Message) error {
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
	return &queue.BatchError{Failed: failed}
}

// ChangeVisibility implements queue.Queue (d is rounded up to seconds).
func (s *Queue) ChangeVisibility(ctx context.Context, m queue.Message, d time.Duration) error {
	_, err := s.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(s.opts.QueueURL), ReceiptHandle: aws.String(m.Receipt), VisibilityTimeout: seconds(d),
	})
	if err != nil {
		return fmt.Errorf("sqs: change visibility of %s: %w", m.ID, err)
	}
	return nil
}

// DeadLetter implements queue.Queue: send to the DLQ, then delete. If
// the delete fails after the send, the message is delivered again and may
// be forwarded twice; the DLQ copy carries the source message id to tell.
func (s *Queue) DeadLetter(ctx context.Context, m queue.Message, r queue.Reason) error {
	if _, err := s.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(s.opts.DLQURL), MessageBody: aws.String(string(m.Body)),
		MessageAttributes: toAttrs(deadLetterAttrs(m, r)),
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

// checkAttrs refuses the message attributes SQS refuses (moto takes every
// one of them): more than maxAttributes, a name outside SQS's rules, an
// empty value, a value with a character SQS does not carry.
func checkAttrs(attrs map[string]string) error {
	if len(attrs) > maxAttributes {
		return fmt.Errorf("%d message attributes, SQS takes at most %d", len(attrs), maxAttributes)
	}
	for k, v := range attrs {
		if err := checkAttrName(k); err != nil {
			return err
		}
		if v == "" {
			return fmt.Errorf("message attribute %q is empty (SQS refuses an empty value)", k)
		}
		if i := strings.IndexFunc(v, notSQSText); i >= 0 || !utf8.ValidString(v) {
			return fmt.Errorf("message attribute %q holds a character SQS refuses (allowed: tab, newline, carriage return, U+0020 to U+D7FF, U+E000 to U+FFFD, U+10000 and above)", k)
		}
	}
	return nil
}

// checkAttrName: SQS's rules for a message attribute's name.
func checkAttrName(k string) error {
	lower := strings.ToLower(k)
	switch {
	case k == "" || len(k) > 256:
		return fmt.Errorf("message attribute name %q: SQS takes 1 to 256 characters", k)
	case strings.IndexFunc(k, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) >= 0:
		return fmt.Errorf("message attribute name %q: SQS takes only A-Z, a-z, 0-9, '_', '-' and '.'", k)
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fmt.Errorf("message attribute name %q: the prefixes AWS. and Amazon. are AWS's own", k)
	case strings.HasPrefix(k, ".") || strings.HasSuffix(k, ".") || strings.Contains(k, ".."):
		return fmt.Errorf("message attribute name %q: SQS refuses a name that starts or ends with '.' or has '..'", k)
	}
	return nil
}

// notSQSText: a character SQS does not carry in a message or an attribute
// (its allowed set is XML's: #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD,
// #x10000-#x10FFFF).
func notSQSText(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return false
	case r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE, r == 0xFFFF, r == utf8.RuneError:
		return true
	}
	return false
}

// sqsText is s with every character SQS refuses replaced by U+FFFD (a
// dead letter's reason is ours to write, whatever an error said).
func sqsText(s string) string {
	return strings.Map(func(r rune) rune {
		if notSQSText(r) {
			return '\uFFFD'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// payload is what SQS counts of a message against its size limit: the
// body, and each attribute's name, type and value.
func payload(body []byte, attrs map[string]string) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k) + len("String") + len(v)
	}
	return n
}

// deadLetterAttrs are the dead-letter attributes as SQS takes them: no
// empty value (an empty reason code), no character SQS refuses (a reason's
// detail is an error's text, whatever it quoted).
func deadLetterAttrs(m queue.Message, r queue.Reason) map[string]string {
	attrs := queue.DeadLetterAttributes(m, r, maxAttributes)
	for k, v := range attrs {
		if v = sqsText(v); v == "" {
			delete(attrs, k)
		} else {
			attrs[k] = v
		}
	}
	return attrs
}

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// toAttrs turns string attributes into SQS message attributes (nil for none).
func toAttrs(attrs map[string]string) map[string]types.MessageAttributeValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for k, v := range attrs {
		out[k] = strAttr(v)
	}
	return out
}

// fromAttrs reads the string-valued attributes of a received message.
func fromAttrs(attrs map[string]types.MessageAttributeValue) map[string]string {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]string, len(attrs))
	for k, v := range attrs {
		if v.StringValue != nil {
			out[k] = *v.StringValue
		}
	}
	return out
}

// Send implements queue.Queue.
func (s *Queue) Send(ctx context.Context, body []byte, attrs map[string]string) (string, error) {
	if err := queue.CheckOutgoing(body, attrs); err != nil {
		return "", fmt.Errorf("sqs: send: %w", err)
	}
	if err := checkAttrs(attrs); err != nil {
		return "", fmt.Errorf("sqs: send: %w", err)
	}
	out, err := s.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(s.opts.QueueURL), MessageBody: aws.String(string(body)), MessageAttributes: toAttrs(attrs),
	})
	if err != nil {
		return "", fmt.Errorf("sqs: send: %w", err)
	}
	return aws.ToString(out.MessageId), nil
}

// SendBatch implements queue.Queue: one SendMessageBatch per 10 messages
// or fewer, as many as fit queue.MaxMessageBytes together (SQS refuses a
// batch whose payload passes its limit, BatchRequestTooLong; the one a
// message is held to here is within it), in order; it stops at the first
// batch with a failure.
func (s *Queue) SendBatch(ctx context.Context, msgs []queue.Outgoing) (int, error) {
	if err := queue.CheckBatch(msgs); err != nil {
		return 0, fmt.Errorf("sqs: send batch: %w", err)
	}
	for i, m := range msgs {
		if err := checkAttrs(m.Attributes); err != nil {
			return 0, fmt.Errorf("sqs: send batch: message %d of the batch: %w", i, err)
		}
		if n := payload(m.Body, m.Attributes); n > queue.MaxMessageBytes {
			return 0, fmt.Errorf("sqs: send batch: message %d of the batch: %w: %d bytes with its attributes, the limit is %d",
				i, queue.ErrTooLarge, n, queue.MaxMessageBytes)
		}
	}
	for start, end := 0, 0; start < len(msgs); start = end {
		size := 0
		for end = start; end < len(msgs) && end-start < 10; end++ {
			n := payload(msgs[end].Body, msgs[end].Attributes)
			if end > start && size+n > queue.MaxMessageBytes {
				break
			}
			size += n
		}
		chunk := msgs[start:end]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Body)),
				MessageAttributes: toAttrs(m.Attributes)}
		}
		out, err := s.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.opts.QueueURL), Entries: entries})
		if err != nil {
			return start, fmt.Errorf("sqs: send batch: %w", err)
		}
		if len(out.Failed) > 0 {
			first := len(chunk)
			for _, f := range out.Failed {
				if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil {
					first = min(first, i)
				}
			}
			f := out.Failed[0]
			return start + first, fmt.Errorf("sqs: send batch: %d of %d failed, e.g. %s: %s", len(out.Failed), len(chunk), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return len(msgs), nil
}

// Depth implements queue.Queue from the queues' approximate counts
// (Approximate: SQS's counts are eventually consistent, about a minute).
func (s *Queue) Depth(ctx context.Context) (queue.Depth, error) {
	m, err := counts(ctx, s.api, s.opts.QueueURL)
	if err != nil {
		return queue.Depth{}, err
	}
	d, err := counts(ctx, s.api, s.opts.DLQURL)
	if err != nil {
		return queue.Depth{}, err
	}
	return queue.Depth{Waiting: m.Visible + m.Delayed, InFlight: m.InFlight, DLQ: d.Total(), Approximate: true}, nil
}

// Ping implements queue.Queue: both queues answer GetQueueAttributes.
func (s *Queue) Ping(ctx context.Context) error {
	_, err := s.Depth(ctx)
	return err
}

// RetentionPeriods reads the MessageRetentionPeriod of the queue and the DLQ.
func (s *Queue) RetentionPeriods(ctx context.Context) (main, dlq time.Duration, err error) {
	if main, err = retentionPeriod(ctx, s.api, s.opts.QueueURL); err != nil {
		return 0, 0, err
	}
	dlq, err = retentionPeriod(ctx, s.api, s.opts.DLQURL)
	return main, dlq, err
}

// MaxReceiveCount reads the maxReceiveCount of the queue's redrive policy:
// after that many receives SQS moves a message to its DLQ by itself. 0:
// the queue has no redrive policy.
func (s *Queue) MaxReceiveCount(ctx context.Context) (int, error) {
	out, err := s.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.opts.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		return 0, fmt.Errorf("sqs: redrive policy of %s: %w", s.opts.QueueURL, err)
	}
	raw := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	if raw == "" {
		return 0, nil
	}
	var p struct {
		MaxReceiveCount json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return 0, fmt.Errorf("sqs: redrive policy of %s: %w", s.opts.QueueURL, err)
	}
	n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("sqs: redrive policy of %s: maxReceiveCount %s is not a count", s.opts.QueueURL, p.MaxReceiveCount)
	}
	return n, nil
}
