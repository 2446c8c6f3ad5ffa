package charge

import (
	"encoding/json"
	"time"
)

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
