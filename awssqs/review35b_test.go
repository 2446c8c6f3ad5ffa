package awssqs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/finedge/idempotent-consumer/queue"
)

// failDeleteAPI is the SQS client whose DeleteMessage fails (throttled, a
// lost connection): what MoveBack reports as "sent, but delete from the
// DLQ failed".
type failDeleteAPI struct{ *sqs.Client }

func (failDeleteAPI) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return nil, errors.New("review35b: throttled")
}

// REVIEW 35b: the redrive's audit line now names only what Moved saw, and
// Redrive calls Moved only after a MoveBack that returned nil. An SQS
// MoveBack whose send went through and whose delete failed returns an
// error: the charge is back on the queue (it will be debited if its record
// says so), yet Moved never sees it, rep.Moved does not count it, and
// runRedrive writes no audit line at all when it was the only one (before
// 03343fd, Visit named every entry about to be moved).
func TestReview35bASentButNotDeletedEntryIsNamedByNoAuditLine(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	q := f.queue(t, failDeleteAPI{f.c})
	var named []string
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{Max: 1, Moved: func(e queue.DLQEntry) { named = append(named, e.ID) }})
	if err == nil {
		t.Fatal("redrive with a failing delete: no error")
	}
	out, rerr := f.c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.qs.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("main queue holds %d messages after the redrive, want the 1 sent", len(out.Messages))
	}
	if len(named) != 1 || rep.Moved != 1 {
		t.Fatalf("an entry is back on the queue (%s), but Moved named %d entries and the report says moved %d (err: %v): the audit line names no charge",
			aws.ToString(out.Messages[0].Body), len(named), rep.Moved, err)
	}
}
