package charge

import (
	"context"
	"encoding/json"
	"fmt"
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

// AdvanceNoticeType is the "type" of an advance notice.
const AdvanceNoticeType = "ADVANCE_DEBIT_NOTICE"

// AdvanceNotice is the documented body of an advance notice on every
// production channel (notice-first mode): sent, and recorded, before the
// debit, which waits at least until DebitOnOrAfter (and the lead after
// the notice's last send). The account is masked; Text is what the
// customer reads. NotificationKey, and the whole notice, are the same for
// every send of one charge's advance notice, so that the channel can
// recognise a repeat (a re-send after a crash between sending it and
// recording it) as the same request. One notice
// covers every attempt of the charge, retries after a decline included.
type AdvanceNotice struct {
	Type            string    `json:"type"`
	NotificationKey string    `json:"notificationKey"`
	ChargeID        string    `json:"chargeId"`
	Account         string    `json:"account"` // masked: ********7890
	Amount          NoticeAmt `json:"amount"`
	ChargeType      Type      `json:"chargeType"`
	DueDate         string    `json:"dueDate"` // YYYY-MM-DD
	DebitOnOrAfter  time.Time `json:"debitOnOrAfter"`
	// Text: "₹25.00 will be debited on or after 2026-12-01 09:00 UTC".
	Text string `json:"text"`
}

// AdvanceNotificationKey is the idempotency key of c's advance notice
// (apart from its post-debit notice's, NotificationKey).
func AdvanceNotificationKey(chargeID string) string { return chargeID + ":advance-notice" }

// AdvanceNoticeOf is the advance notice of c's debit on or after at.
func AdvanceNoticeOf(c Charge, at time.Time) AdvanceNotice {
	at = at.UTC()
	return AdvanceNotice{
		Type: AdvanceNoticeType, NotificationKey: AdvanceNotificationKey(c.ID), ChargeID: c.ID, Account: MaskAccount(c.AccountID),
		Amount: NoticeAmt{Minor: c.Amount.Minor, Currency: c.Amount.Currency}, ChargeType: c.Type,
		DueDate: c.DueDate.Format(time.DateOnly), DebitOnOrAfter: at,
		// To the minute, rounded down: "on or after" the time written
		// holds whatever the seconds.
		Text: fmt.Sprintf("%s will be debited on or after %s", c.Amount.Human(), at.Format("2006-01-02 15:04 UTC")),
	}
}

// Marshal is the notice's JSON.
func (n AdvanceNotice) Marshal() ([]byte, error) { return json.Marshal(n) }

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
