package operate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Renotified is what Renotifier.One did with one record.
type Renotified struct {
	ChargeID  string `json:"chargeId"`
	Reference string `json:"reference,omitempty"`
	Result    string `json:"result"` // would_send, sent, failed, skipped
	Why       string `json:"why,omitempty"`
}

// Renotifier sends the pre-debit notice that failed after a successful
// debit (a DEBITED_NOTIFICATION_FAILED record) again, with the same
// notification key, and on success records DEBITED with a history line:
// one conditional write on the record as read. It never calls the bank.
type Renotifier struct {
	Sender  charge.NoticeSender // nil for a dry run
	Amender driver.Amender
	Channel string        // named in the history line
	Timeout time.Duration // one notification; default 5s
}

// One renotifies rec, by operator for reason; dryRun only says whether it
// would send.
func (r Renotifier) One(ctx context.Context, rec idempotency.Record, operator, reason string, dryRun bool, now time.Time) Renotified {
	notice, ok := charge.PendingNotice(rec.Status, rec.Detail)
	switch {
	case rec.State != idempotency.StateDone || rec.Status != string(charge.DebitedNotificationFailed):
		return Renotified{ChargeID: rec.Key, Result: "skipped", Why: fmt.Sprintf("%s %s: only DEBITED_NOTIFICATION_FAILED is notified again", rec.State, rec.Status)}
	case !ok:
		return Renotified{ChargeID: rec.Key, Result: "skipped", Why: "the record keeps no notice (written by an older version): notify the customer by hand"}
	case dryRun:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "would_send"}
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	err := r.Sender.SendNotice(sctx, notice)
	cancel()
	if err != nil {
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: charge.Clip(err.Error(), 300)}
	}
	line := fmt.Sprintf("renotified %s by %s on %s: %s notice sent; was DEBITED_NOTIFICATION_FAILED; why: %s",
		now.UTC().Format(time.RFC3339), operator, r.Channel, notice.NotificationKey, reason)
	_, err = r.Amender.Amend(ctx, driver.AmendRequest{Key: rec.Key, Token: rec.Token, FromStatus: rec.Status, Status: string(charge.Debited),
		Detail: notice.Reference, History: append(append([]string(nil), rec.History...), line), Now: time.Now()})
	if err != nil {
		why := "sent, but the record could not be updated: " + err.Error()
		if errors.Is(err, idempotency.ErrStale) {
			why = "sent, but the record changed meanwhile (someone else renotified it?); the receiver drops the repeat by its key"
		}
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: why}
	}
	return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "sent"}
}
