package charge

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// NoticeSender is a notification channel that can send a notice built
// earlier (renotify sends the one a DEBITED_NOTIFICATION_FAILED record
// kept). Every production channel is one.
type NoticeSender interface {
	SendNotice(ctx context.Context, n Notice) error
}

// NoticeType is the "type" of a pre-debit notice.
const NoticeType = "PRE_DEBIT"

// Notice is the documented body of a pre-debit notification on every
// production channel (SNS message, webhook body, log line): what a
// customer-facing system needs to tell the customer, with the account
// masked. NotificationKey is the same for every send of one charge's
// notice, so that the channel can drop a repeat.
type Notice struct {
	Type            string    `json:"type"`
	NotificationKey string    `json:"notificationKey"`
	ChargeID        string    `json:"chargeId"`
	Account         string    `json:"account"` // masked: ********7890
	Amount          NoticeAmt `json:"amount"`
	ChargeType      Type      `json:"chargeType"`
	DueDate         string    `json:"dueDate"` // YYYY-MM-DD
	Reference       string    `json:"reference"`
	DebitedAt       time.Time `json:"debitedAt"`
}

// NoticeAmt is integer minor units and an ISO-4217 code.
type NoticeAmt struct {
	Minor    int64    `json:"minor"`
	Currency Currency `json:"currency"`
}

// NotificationKey is the idempotency key of c's pre-debit notification.
func NotificationKey(chargeID string) string { return chargeID + ":pre-debit" }

// NoticeOf is the notice of c's debit.
func NoticeOf(c Charge, receipt DebitReceipt, now time.Time) Notice {
	return Notice{
		Type: NoticeType, NotificationKey: NotificationKey(c.ID), ChargeID: c.ID, Account: MaskAccount(c.AccountID),
		Amount: NoticeAmt{Minor: c.Amount.Minor, Currency: c.Amount.Currency}, ChargeType: c.Type,
		DueDate: c.DueDate.Format(time.DateOnly), Reference: receipt.Reference, DebitedAt: now.UTC(),
	}
}

// Marshal is the notice's JSON.
func (n Notice) Marshal() ([]byte, error) { return json.Marshal(n) }

// ReferenceOf is the core-banking reference of a DONE record's result: the
// detail itself, or — for DEBITED_NOTIFICATION_FAILED, whose detail is the
// notice still to be sent — the notice's reference.
func ReferenceOf(status, detail string) string {
	if n, ok := PendingNotice(status, detail); ok {
		return n.Reference
	}
	return detail
}

// PendingNotice is the notice kept in a DEBITED_NOTIFICATION_FAILED
// record's detail, if it holds one.
func PendingNotice(status, detail string) (Notice, bool) {
	var n Notice
	if status != string(DebitedNotificationFailed) || !strings.HasPrefix(detail, "{") || json.Unmarshal([]byte(detail), &n) != nil || n.ChargeID == "" {
		return Notice{}, false
	}
	return n, true
}
