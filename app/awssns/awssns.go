// Package awssns is a pre-debit notification channel on Amazon SNS: each
// notice (charge.Notice, JSON) is published to one topic, with message
// attributes for routing (the charge type, the notice type) and the
// notification key, so that subscribers — an SMS or e-mail service, an SQS
// queue — can filter and drop repeats. It uses aws-sdk-go-v2's standard
// credential and endpoint chain (AWS_ENDPOINT_URL points it at an
// emulator).
//
// A publish that SNS did not acknowledge is a failed notification: the
// charge is recorded DEBITED_NOTIFICATION_FAILED, never debited again. In
// notice-first mode the advance notice (charge.AdvanceNotice, noticeType
// ADVANCE_DEBIT_NOTICE) is published before the debit; one that SNS did not
// acknowledge means no debit.
package awssns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// API is the part of the SNS client the notifier calls.
type API interface {
	Publish(ctx context.Context, in *sns.PublishInput, opts ...func(*sns.Options)) (*sns.PublishOutput, error)
}

var _ API = (*sns.Client)(nil)

// The message attributes of every notice.
const (
	AttrChargeType      = "chargeType"
	AttrNoticeType      = "noticeType"
	AttrNotificationKey = "notificationKey"
)

// Options configure a Notifier.
type Options struct {
	// TopicARN is the topic published to. Required.
	TopicARN string
	// Now is the clock of the notice's debitedAt. Default time.Now.
	Now func() time.Time
}

// Notifier implements charge.Notifier on SNS.
type Notifier struct {
	api   API
	topic string
	fifo  bool
	now   func() time.Time
}

var (
	_ charge.Notifier        = (*Notifier)(nil)
	_ charge.NoticeSender    = (*Notifier)(nil)
	_ charge.AdvanceNotifier = (*Notifier)(nil)
)

// New checks o and returns a Notifier over api.
func New(api API, o Options) (*Notifier, error) {
	if api == nil {
		return nil, errors.New("awssns: New needs a client")
	}
	if err := CheckTopicARN(o.TopicARN); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Notifier{api: api, topic: o.TopicARN, fifo: strings.HasSuffix(o.TopicARN, ".fifo"), now: o.Now}, nil
}

// CheckTopicARN says what is wrong with a topic ARN, if anything.
func CheckTopicARN(arn string) error {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sns" || parts[5] == "" {
		return fmt.Errorf("awssns: topic %q is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)", arn)
	}
	return nil
}

// NotifyPreDebit implements charge.Notifier: one Publish.
func (n *Notifier) NotifyPreDebit(ctx context.Context, c charge.Charge, receipt charge.DebitReceipt) error {
	return n.SendNotice(ctx, charge.NoticeOf(c, receipt, n.now()))
}

// SendNotice implements charge.NoticeSender.
func (n *Notifier) SendNotice(ctx context.Context, notice charge.Notice) error {
	body, err := notice.Marshal()
	if err != nil {
		return err
	}
	return n.publish(ctx, body, charge.NoticeType, notice.ChargeType, notice.ChargeID, notice.NotificationKey)
}

// NotifyAdvance implements charge.AdvanceNotifier: one Publish of the
// advance notice (charge.AdvanceNotice), noticeType ADVANCE_DEBIT_NOTICE,
// notificationKey "<chargeId>:advance-notice". A publish SNS did not
// acknowledge means no debit; the notice is published again later under
// the same key.
func (n *Notifier) NotifyAdvance(ctx context.Context, notice charge.AdvanceNotice) error {
	body, err := notice.Marshal()
	if err != nil {
		return err
	}
	return n.publish(ctx, body, charge.AdvanceNoticeType, notice.ChargeType, notice.ChargeID, notice.NotificationKey)
}

// publish sends one notice's body with its routing attributes.
func (n *Notifier) publish(ctx context.Context, body []byte, noticeType string, chargeType charge.Type, chargeID, key string) error {
	in := &sns.PublishInput{
		TopicArn: aws.String(n.topic),
		Message:  aws.String(string(body)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			AttrChargeType:      {DataType: aws.String("String"), StringValue: aws.String(string(chargeType))},
			AttrNoticeType:      {DataType: aws.String("String"), StringValue: aws.String(noticeType)},
			AttrNotificationKey: {DataType: aws.String("String"), StringValue: aws.String(key)},
		},
	}
	if n.fifo {
		// A FIFO topic drops a repeat of the key within its 5-minute window.
		in.MessageGroupId = aws.String(chargeID)
		in.MessageDeduplicationId = aws.String(dedupID(key))
	}
	if _, err := n.api.Publish(ctx, in); err != nil {
		return fmt.Errorf("awssns: publish the %s of %s: %w", noticeName(noticeType), chargeID, err)
	}
	return nil
}

// noticeName is how an error names a notice of the type.
func noticeName(noticeType string) string {
	if noticeType == charge.AdvanceNoticeType {
		return "advance notice"
	}
	return "notice"
}

// dedupID fits a key into SNS's deduplication id (1-128 of
// alphanumerics and punctuation).
func dedupID(key string) string {
	b := []byte(key)
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 128)])
}

// TopicAPI is the part of the SNS client CreateTopic calls.
type TopicAPI interface {
	CreateTopic(ctx context.Context, in *sns.CreateTopicInput, opts ...func(*sns.Options)) (*sns.CreateTopicOutput, error)
}

var _ TopicAPI = (*sns.Client)(nil)

// TopicName is the name in a topic ARN, or name itself when it is not an
// ARN (setup takes either).
func TopicName(nameOrARN string) string {
	if CheckTopicARN(nameOrARN) == nil {
		return nameOrARN[strings.LastIndex(nameOrARN, ":")+1:]
	}
	return nameOrARN
}

// CreateTopic creates the topic named name (a FIFO topic when the name
// ends in .fifo) and returns its ARN. SNS's CreateTopic is idempotent: a
// topic that exists with the same attributes is returned, not created
// again (development and tests; production creates it with the stack).
func CreateTopic(ctx context.Context, api TopicAPI, name string) (string, error) {
	in := &sns.CreateTopicInput{Name: aws.String(name)}
	if strings.HasSuffix(name, ".fifo") {
		in.Attributes = map[string]string{"FifoTopic": "true"}
	}
	out, err := api.CreateTopic(ctx, in)
	if err != nil {
		return "", fmt.Errorf("awssns: create topic %s: %w", name, err)
	}
	return aws.ToString(out.TopicArn), nil
}

// CreateTopicFromConfig is CreateTopic with a client made from cfg.
func CreateTopicFromConfig(ctx context.Context, cfg aws.Config, name string) (string, error) {
	return CreateTopic(ctx, sns.NewFromConfig(cfg), name)
}

// ValidTopicName is SNS's rule for a topic name: 1-256 letters, digits, -
// and _, with .fifo at the end for a FIFO topic.
func ValidTopicName(name string) bool {
	base := strings.TrimSuffix(name, ".fifo")
	if base == "" || len(name) > 256 {
		return false
	}
	for _, r := range base {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
