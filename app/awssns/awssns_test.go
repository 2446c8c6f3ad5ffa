package awssns_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/finedge/idempotent-consumer/app/awssns"
	"github.com/finedge/idempotent-consumer/app/charge"
)

// fakeSNS records what is published (a hand-written fake: the real
// service is exercised on the emulator in cmd/chargerecovery).
type fakeSNS struct {
	in  []*sns.PublishInput
	err error
}

func (f *fakeSNS) Publish(_ context.Context, in *sns.PublishInput, _ ...func(*sns.Options)) (*sns.PublishOutput, error) {
	f.in = append(f.in, in)
	return &sns.PublishOutput{}, f.err
}

var fee = charge.Charge{ID: "CHG-9", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
	Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}

func TestTheNoticeAndItsRoutingAttributes(t *testing.T) {
	for _, topic := range []string{"arn:aws:sns:ap-south-1:123456789012:notices", "arn:aws:sns:ap-south-1:123456789012:notices.fifo"} {
		f := &fakeSNS{}
		n, err := awssns.New(f, awssns.Options{TopicARN: topic})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.NotifyPreDebit(t.Context(), fee, charge.DebitReceipt{Reference: "CBS1"}); err != nil {
			t.Fatal(err)
		}
		in := f.in[0]
		var got charge.Notice
		if err := json.Unmarshal([]byte(*in.Message), &got); err != nil || got.ChargeID != "CHG-9" || got.Account != "********7890" || got.Reference != "CBS1" {
			t.Fatalf("message %s: %v", *in.Message, err)
		}
		if strings.Contains(*in.Message, "001234567890") {
			t.Fatal("the message holds the full account")
		}
		if *in.MessageAttributes["chargeType"].StringValue != "SMS_ALERT_FEE" || *in.MessageAttributes["notificationKey"].StringValue != "CHG-9:pre-debit" {
			t.Fatalf("attributes %+v", in.MessageAttributes)
		}
		fifo := strings.HasSuffix(topic, ".fifo")
		if fifo != (in.MessageDeduplicationId != nil && *in.MessageDeduplicationId == "CHG-9:pre-debit" && *in.MessageGroupId == "CHG-9") {
			t.Fatalf("%s: dedup id %v, group %v", topic, in.MessageDeduplicationId, in.MessageGroupId)
		}
	}
}

func TestAFailedPublishIsAFailedNotificationAndABadTopicIsRefused(t *testing.T) {
	n, _ := awssns.New(&fakeSNS{err: errors.New("throttled")}, awssns.Options{TopicARN: "arn:aws:sns:us-east-1:1:t"})
	if err := n.NotifyPreDebit(t.Context(), fee, charge.DebitReceipt{Reference: "CBS1"}); err == nil || !strings.Contains(err.Error(), "CHG-9") {
		t.Fatalf("err = %v", err)
	}
	for _, bad := range []string{"", "my-topic", "arn:aws:sqs:us-east-1:1:q", "arn:aws:sns:us-east-1:1:"} {
		if _, err := awssns.New(&fakeSNS{}, awssns.Options{TopicARN: bad}); err == nil {
			t.Errorf("topic %q accepted", bad)
		}
	}
}

// The advance notice is published with its own type and key (a FIFO topic
// drops a re-send under the key); a failed publish is an error, which
// keeps the charge from being debited.
func TestTheAdvanceNoticeAndItsRoutingAttributes(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, topic := range []string{"arn:aws:sns:ap-south-1:123456789012:notices", "arn:aws:sns:ap-south-1:123456789012:notices.fifo"} {
		f := &fakeSNS{}
		n, err := awssns.New(f, awssns.Options{TopicARN: topic})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.NotifyAdvance(t.Context(), charge.AdvanceNoticeOf(fee, at)); err != nil {
			t.Fatal(err)
		}
		in := f.in[0]
		var got charge.AdvanceNotice
		if err := json.Unmarshal([]byte(*in.Message), &got); err != nil || got != charge.AdvanceNoticeOf(fee, at) {
			t.Fatalf("message %s: %v", *in.Message, err)
		}
		if strings.Contains(*in.Message, "001234567890") {
			t.Fatal("the message holds the full account")
		}
		attrs := in.MessageAttributes
		if *attrs["noticeType"].StringValue != "ADVANCE_DEBIT_NOTICE" || *attrs["chargeType"].StringValue != "SMS_ALERT_FEE" ||
			*attrs["notificationKey"].StringValue != "CHG-9:advance-notice" {
			t.Fatalf("attributes %+v", attrs)
		}
		fifo := strings.HasSuffix(topic, ".fifo")
		if fifo != (in.MessageDeduplicationId != nil && *in.MessageDeduplicationId == "CHG-9:advance-notice" && *in.MessageGroupId == "CHG-9") {
			t.Fatalf("%s: dedup id %v, group %v", topic, in.MessageDeduplicationId, in.MessageGroupId)
		}
	}
	n, _ := awssns.New(&fakeSNS{err: errors.New("throttled")}, awssns.Options{TopicARN: "arn:aws:sns:us-east-1:1:t"})
	if err := n.NotifyAdvance(t.Context(), charge.AdvanceNoticeOf(fee, at)); err == nil || err.Error() != "awssns: publish the advance notice of CHG-9: throttled" {
		t.Fatalf("err = %v", err)
	}
}
