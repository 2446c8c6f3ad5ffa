package awssns_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/finedge/idempotent-consumer/app/awssns"
)

type fakeTopics struct{ in []*sns.CreateTopicInput }

func (f *fakeTopics) CreateTopic(_ context.Context, in *sns.CreateTopicInput, _ ...func(*sns.Options)) (*sns.CreateTopicOutput, error) {
	f.in = append(f.in, in)
	return &sns.CreateTopicOutput{TopicArn: aws.String("arn:aws:sns:us-east-1:123456789012:" + *in.Name)}, nil
}

// setup takes a name or serve's ARN; a .fifo name makes a FIFO topic (on
// the emulator: cmd/chargerecovery's SNS test runs setup twice).
func TestCreateTopicTakesANameOrAnARNAndMakesFIFOTopicsFIFO(t *testing.T) {
	for in, want := range map[string]string{"notices": "notices", "arn:aws:sns:ap-south-1:123456789012:pre-debit": "pre-debit", "arn:bad": "arn:bad"} {
		if got := awssns.TopicName(in); got != want {
			t.Errorf("TopicName(%q) = %q, want %q", in, got, want)
		}
	}
	var f fakeTopics
	for _, name := range []string{"notices", "notices.fifo"} {
		arn, err := awssns.CreateTopic(t.Context(), &f, name)
		if err != nil || arn != "arn:aws:sns:us-east-1:123456789012:"+name {
			t.Fatalf("CreateTopic(%s) = %q, %v", name, arn, err)
		}
	}
	if f.in[0].Attributes != nil || f.in[1].Attributes["FifoTopic"] != "true" {
		t.Fatalf("attributes: %v, %v", f.in[0].Attributes, f.in[1].Attributes)
	}
}
