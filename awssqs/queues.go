package awssqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// QueueSpec describes the queue pair CreateQueues makes.
type QueueSpec struct {
	Name, DLQName string
	// VisibilityTimeout of the main queue. Default 30s.
	VisibilityTimeout time.Duration
	// MaxReceiveCount for the redrive policy: after this many receives SQS
	// moves a message to the DLQ by itself (the last resort). Default 10.
	MaxReceiveCount int
	// Retention of both queues. Default 4 days (main), 14 days (DLQ).
	Retention time.Duration
}

// Queues are the URLs of a created pair.
type Queues struct {
	URL, DLQURL, DLQARN string
}

// CreateQueues creates (or finds) the DLQ and the main queue with a redrive
// policy to it, for development and tests. Production queues belong in
// infrastructure code; this is the same shape.
func CreateQueues(ctx context.Context, c *sqs.Client, spec QueueSpec) (Queues, error) {
	if spec.Name == "" || spec.DLQName == "" {
		return Queues{}, errors.New("sqs: CreateQueues needs Name and DLQName")
	}
	if spec.VisibilityTimeout == 0 {
		spec.VisibilityTimeout = 30 * time.Second
	}
	if spec.MaxReceiveCount == 0 {
		spec.MaxReceiveCount = 10
	}
	retention := spec.Retention
	if retention == 0 {
		retention = 4 * 24 * time.Hour
	}
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(spec.DLQName),
		Attributes: map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int((14 * 24 * time.Hour).Seconds()))},
	})
	if err != nil {
		return Queues{}, fmt.Errorf("sqs: create DLQ %s: %w", spec.DLQName, err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return Queues{}, fmt.Errorf("sqs: DLQ ARN: %w", err)
	}
	arn := attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
	redrive, _ := json.Marshal(map[string]string{"deadLetterTargetArn": arn, "maxReceiveCount": strconv.Itoa(spec.MaxReceiveCount)})
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(spec.Name),
		Attributes: map[string]string{
			string(types.QueueAttributeNameVisibilityTimeout):      strconv.Itoa(int(seconds(spec.VisibilityTimeout))),
			string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(retention.Seconds())),
			string(types.QueueAttributeNameRedrivePolicy):          string(redrive),
		},
	})
	if err != nil {
		return Queues{}, fmt.Errorf("sqs: create queue %s: %w", spec.Name, err)
	}
	return Queues{URL: aws.ToString(q.QueueUrl), DLQURL: aws.ToString(dlq.QueueUrl), DLQARN: arn}, nil
}

// QueueURL looks a queue's URL up by name.
func QueueURL(ctx context.Context, c *sqs.Client, name string) (string, error) {
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", fmt.Errorf("sqs: queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// Depth is a queue's approximate message counts.
type Depth struct {
	Visible, InFlight, Delayed int
}

// Total is every message the queue holds.
func (d Depth) Total() int { return d.Visible + d.InFlight + d.Delayed }

// counts reads a queue's approximate counts.
func counts(ctx context.Context, c API, url string) (Depth, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return Depth{}, fmt.Errorf("sqs: attributes of %s: %w", url, err)
	}
	n := func(a types.QueueAttributeName) int { v, _ := strconv.Atoi(out.Attributes[string(a)]); return v }
	return Depth{
		Visible:  n(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}, nil
}

// DeleteQueue deletes a queue (tests, demo reset). A missing queue is fine.
func DeleteQueue(ctx context.Context, c *sqs.Client, url string) error {
	_, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	var missing *types.QueueDoesNotExist
	if err != nil && !errors.As(err, &missing) {
		return fmt.Errorf("sqs: delete queue %s: %w", url, err)
	}
	return nil
}

// retentionPeriod reads a queue's MessageRetentionPeriod.
func retentionPeriod(ctx context.Context, c API, url string) (time.Duration, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod},
	})
	if err != nil {
		return 0, fmt.Errorf("sqs: retention of %s: %w", url, err)
	}
	s, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)])
	if err != nil {
		return 0, fmt.Errorf("sqs: retention of %s: %q is not a number of seconds", url, out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)])
	}
	return time.Duration(s) * time.Second, nil
}
