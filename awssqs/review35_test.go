package awssqs_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/queue"
)

// ATTACK (surface 3): a redrive moves what it once received without
// checking that it still holds it. The hold is renewed only in Next, before
// a receive; the moves of a page (a SendMessage and a DeleteMessage each,
// with the SDK's retries and backoff) and the caller's Match/Visit run with
// no renewal. A page whose moves outlast the hold (30 s in production; 2 s
// here) is visible again meanwhile: another operator's redrive receives and
// moves those entries, and this one then sends each of them to the queue a
// second time — one DLQ entry becomes two queue messages, and the two runs
// report more moved than the DLQ ever held. (The second delivery is caught
// by the claim while the record lasts; past retention it is a second debit,
// which is why MaxAge exists.)
func TestReview35ARedriveWhoseHoldLapsedMidPageMovesEntriesTwice(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t)
	var other queue.RedriveReport
	first := true
	rep, err := f.queue(t, f.c).RedriveHolding(t.Context(), 2*time.Second, 2*time.Second, queue.RedriveOptions{
		Match: func(queue.DLQEntry) bool {
			if first {
				first = false
				// This page's moves are slow (throttled sends): the hold
				// lapses, and another operator's redrive runs meanwhile.
				time.Sleep(3 * time.Second)
				var oerr error
				other, oerr = f.queue(t, f.c).Redrive(t.Context(), queue.RedriveOptions{})
				if oerr != nil {
					t.Errorf("the other redrive: %v", oerr)
				}
			}
			return true
		}})
	out, aerr := f.c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(f.qs.URL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if aerr != nil {
		t.Fatal(aerr)
	}
	onQueue, _ := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if onQueue != dlqEntries || rep.Moved+other.Moved != dlqEntries {
		t.Fatalf("%d DLQ entries redriven by two runs: the queue holds %d messages; the runs report %d + %d moved (this one's error: %v)",
			dlqEntries, onQueue, rep.Moved, other.Moved, err)
	}
}
