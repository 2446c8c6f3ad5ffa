package main

import (
	"context"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/consumer"
)

// baselineHandler is the same pipeline without the idempotency claim:
// parse, debit, notify, ack. It exists to measure what the guard costs and
// to show what it prevents: every redelivery becomes another debit request.
func baselineHandler(debiter charge.Debiter, notifier charge.Notifier) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
		c, err := charge.ParseEvent(d.Body)
		if err != nil {
			return consumer.Decision{Action: consumer.DeadLetter, Reason: "invalid: " + err.Error()}
		}
		receipt, err := debiter.Debit(ctx, charge.DebitRequest{
			IdempotencyKey: c.ID, AccountID: c.AccountID, Amount: c.Amount, ChargeType: c.Type,
			Narrative: fmt.Sprintf("%s %s", c.Type, c.DueDate.Format(time.DateOnly)),
		})
		if err != nil {
			if charge.Classify(err) == charge.ClassPermanent {
				return consumer.Decision{Action: consumer.DeadLetter, Reason: "debit_failed: " + err.Error()}
			}
			return consumer.Decision{Action: consumer.Retry, Reason: "retry_later: " + err.Error()}
		}
		_ = notifier.NotifyPreDebit(ctx, c, receipt)
		return consumer.Decision{Action: consumer.Ack}
	})
}
