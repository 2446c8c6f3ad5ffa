package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

type noDebit struct{ t *testing.T }

func (n noDebit) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	n.t.Error("a malformed record was debited")
	return charge.DebitReceipt{}, charge.Permanent(nil)
}

// The function's path for a record whose fields are shifted (an account
// number in each field in turn), through lambdasqs as the function wires
// it: dead-lettered as invalid with the field named, and neither the DLQ
// reason nor any log line (the function's, lambdasqs's) holds the account.
func TestLambdaShiftedFieldsNeverReachTheDLQReasonOrTheLog(t *testing.T) {
	const account = "445566778899"
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: noDebit{t}, Notifier: notifysim.NewRecorder(0, log), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	dead := map[string]queue.Reason{}
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: log,
		DeadLetter: func(_ context.Context, m events.SQSMessage, r queue.Reason) error {
			mu.Lock()
			defer mu.Unlock()
			dead[m.MessageId] = r
			return nil
		}}, process(svc, log))
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range wiretest.Shifted(account) {
		t.Run(tt.Name, func(t *testing.T) {
			before := len(logs.String())
			id := fmt.Sprintf("m-%d", i)
			resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: id, Body: tt.Body,
				EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:charges"}}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("invocation: %v %+v, want the record dead-lettered, not retried", err, resp)
			}
			mu.Lock()
			r, ok := dead[id]
			mu.Unlock()
			if !ok || r.Code != "invalid" {
				t.Fatalf("dead-lettered %v with %+v, want code invalid", ok, r)
			}
			line := logs.String()[before:]
			if tt.Field != "" && (!strings.Contains(r.String(), tt.Field) || !strings.Contains(line, tt.Field)) {
				t.Errorf("the field %s is not named: DLQ reason %q, log %s", tt.Field, r, line)
			}
			if f := wiretest.Leaks(r.String(), account); f != "" {
				t.Errorf("the DLQ reason holds the account (%s): %q", f, r)
			}
			if f := wiretest.Leaks(line, account); f != "" {
				t.Errorf("a log line holds the account (%s): %s", f, line)
			}
		})
	}
}
