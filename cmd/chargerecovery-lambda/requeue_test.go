package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/queue"
)

// Simulator seed 7 in small: a charge first received when its message is
// already old (a backlog), declined twice with a retry schedule whose sum
// fits the queue's retention (so the old start check passed) but whose
// last attempt comes after the original message's age has passed the
// retention. A Lambda that only hides the message loses it (SQS deletes it
// by age, the record waits for ever); one that starts a waiting message
// over on its second receive keeps it: a copy carrying the not-before
// lands on the queue, and the charge is resumed and posted once.
//
// Real time on the emulator (moto deletes by MessageRetentionPeriod,
// whose least is 60 s): about 70 s.
func TestLambdaWaitOutlivesTheOriginalMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("about 70 s of real time")
	}
	const account = "001234567777"
	f := newFn(t, corebanksim.Faults{DeclineAccounts: map[string]string{account: "INSUFFICIENT_FUNDS*2"}},
		"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=15s×2", "IC_RETRY_MAX_ATTEMPTS=3")
	if _, err := f.sqs.SetQueueAttributes(t.Context(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(f.q.URL),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameMessageRetentionPeriod): "60"}}); err != nil {
		t.Fatal(err)
	}
	f.start()
	const id = "CHG-L-SEED7"
	if _, err := f.sqs.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(f.q.URL), MessageBody: aws.String(chargeBody(id, account))}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	time.Sleep(30 * time.Second) // a backlog: first received at half the retention

	// The event source mapping: receive, invoke, delete what is not named.
	copies := 0
	for time.Since(sent) < 100*time.Second && len(f.ledger.Entries()) == 0 {
		out, err := f.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.q.URL), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			continue
		}
		var ev events.SQSEvent
		idOf := map[string]string{}
		for _, m := range out.Messages {
			rec := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
				Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:charges", AWSRegion: "us-east-1",
				MessageAttributes: map[string]events.SQSMessageAttribute{}}
			for k, v := range m.MessageAttributes {
				rec.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue}
			}
			if nb := rec.MessageAttributes[queue.NotBeforeAttribute].StringValue; nb != nil {
				if _, err := time.Parse(time.RFC3339Nano, *nb); err != nil {
					t.Errorf("a copy's not-before %q: %v", *nb, err)
				}
				if rec.Attributes["ApproximateReceiveCount"] == "1" {
					copies++
				}
			}
			ev.Records = append(ev.Records, rec)
			idOf[rec.MessageId] = rec.MessageId
		}
		named := map[string]bool{}
		for _, n := range f.invoke(ev, idOf, time.Minute) {
			named[n] = true
		}
		for _, rec := range ev.Records {
			age := ""
			if ms, err := strconv.ParseInt(rec.Attributes["SentTimestamp"], 10, 64); err == nil {
				age = time.Since(time.UnixMilli(ms)).Round(time.Second).String()
			}
			t.Logf("t=%s: message %s (receive %s, age %s, not-before %v): named %v", time.Since(sent).Round(time.Second), rec.MessageId,
				rec.Attributes["ApproximateReceiveCount"], age, rec.MessageAttributes[queue.NotBeforeAttribute].StringValue != nil, named[rec.MessageId])
			if named[rec.MessageId] {
				continue
			}
			if _, err := f.sqs.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(f.q.URL), ReceiptHandle: aws.String(rec.ReceiptHandle)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	posted := f.ledger.PostingsByKey()
	if len(posted) != 1 || posted[charge.BankKey(id, 3)] != 1 {
		t.Fatalf("postings %v after %s, want the third attempt posted once: the waiting charge's message was lost (deleted by age at %s)",
			posted, time.Since(sent).Round(time.Second), 60*time.Second)
	}
	if copies == 0 {
		t.Error("no copy with a not-before was received: the message was not started over")
	}
	want(t, "DLQ", f.dlq(), nil)
}
