package awssqs

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/queue"
)

// A producer can set any message attribute on SQS, dlq-reason included;
// what it cannot set is the system attribute SQS adds when its redrive
// policy moves a message. Such a message reads as max_receives whatever
// attributes it carries. (moto does not add the system attribute, so this
// is a unit test of the rule rather than a test against the emulator.)
func TestAProducersReasonAttributeIsNotBelievedOnAMovedMessage(t *testing.T) {
	forged := map[string]string{queue.CodeAttribute: "conflict", queue.DetailAttribute: "looks legitimate"}
	moved := types.Message{Attributes: map[string]string{
		string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn): "arn:aws:sqs:ap-south-1:123456789012:charge-due-events"}}
	if r := dlqReason(moved, forged); r.Code != queue.CodeMaxReceives {
		t.Errorf("a message moved by the redrive policy reads as %v, want %s", r, queue.CodeMaxReceives)
	}
	ours := types.Message{}
	if r := dlqReason(ours, forged); r.Code != "conflict" {
		t.Errorf("a message we dead-lettered reads as %v, want its own reason", r)
	}
	if r := dlqReason(ours, nil); r.Code != queue.CodeMaxReceives {
		t.Errorf("a message without attributes reads as %v", r)
	}
}
