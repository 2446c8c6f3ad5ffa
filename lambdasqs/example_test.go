package lambdasqs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memstore"
)

// A function that debits each charge once: two copies of one charge in a
// batch run once, and a record without an id is a permanent failure (here
// left to the queue's redrive policy, so it is named for retry). In a
// function, pass h to lambda.Start.
func ExampleHandler() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute})
	if err != nil {
		panic(err)
	}
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{
		MinWork: 10 * time.Second, // the longest one debit can take
		Key: func(m events.SQSMessage) (string, error) {
			var c struct{ ChargeID string }
			err := json.Unmarshal([]byte(m.Body), &c)
			return c.ChargeID, err
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, func(ctx context.Context, m events.SQSMessage) error {
		fmt.Println("debit", m.Body)
		return nil
	})
	if err != nil {
		panic(err)
	}
	resp, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: `{"ChargeID":"c-1"}`},
		{MessageId: "m2", Body: `{"ChargeID":"c-1"}`},
		{MessageId: "m3", Body: `{"ChargeID":"c-2"}`},
		{MessageId: "m4", Body: `{}`},
	}})
	fmt.Println(resp.BatchItemFailures, err)
	// Output:
	// debit {"ChargeID":"c-1"}
	// debit {"ChargeID":"c-2"}
	// [{m4}] <nil>
}
