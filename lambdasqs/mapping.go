package lambdasqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// MappingLister is the part of the Lambda API client CheckMapping uses
// (*lambda.Client).
type MappingLister interface {
	ListEventSourceMappings(ctx context.Context, in *lambda.ListEventSourceMappingsInput, optFns ...func(*lambda.Options)) (*lambda.ListEventSourceMappingsOutput, error)
}

// ErrNoPartialBatch: an SQS event source mapping of the function does not
// report batch item failures, so Lambda would delete the records the
// function names for retry.
var ErrNoPartialBatch = errors.New("lambdasqs: the SQS event source mapping does not have FunctionResponseTypes ReportBatchItemFailures")

// ErrCannotTell: the mappings could not be read (no permission, no
// network); the caller decides (warn, and set
// Options.WholeBatchOnFailure).
var ErrCannotTell = errors.New("lambdasqs: cannot tell whether the event source mapping reports batch item failures")

// CheckMapping reads the event source mappings of function (a name or
// ARN; in a function, os.Getenv("AWS_LAMBDA_FUNCTION_NAME")) and returns
// ErrNoPartialBatch, naming the mapping, when one from SQS lacks
// FunctionResponseTypes ReportBatchItemFailures; ErrCannotTell (wrapping
// the cause) when the API refused or could not be reached; nil when every
// SQS mapping has it (or there is none yet).
func CheckMapping(ctx context.Context, api MappingLister, function string) error {
	if function == "" {
		return fmt.Errorf("%w: no function name (AWS_LAMBDA_FUNCTION_NAME is empty)", ErrCannotTell)
	}
	in := &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(function)}
	for {
		out, err := api.ListEventSourceMappings(ctx, in)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCannotTell, err)
		}
		for _, m := range out.EventSourceMappings {
			if !strings.Contains(aws.ToString(m.EventSourceArn), ":sqs:") {
				continue
			}
			if !slices.Contains(m.FunctionResponseTypes, types.FunctionResponseTypeReportBatchItemFailures) {
				return fmt.Errorf("%w: mapping %s from %s (set FunctionResponseTypes: [ReportBatchItemFailures] on it)",
					ErrNoPartialBatch, aws.ToString(m.UUID), aws.ToString(m.EventSourceArn))
			}
		}
		if aws.ToString(out.NextMarker) == "" {
			return nil
		}
		in.Marker = out.NextMarker
	}
}
