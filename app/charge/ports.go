package charge

import (
	"context"
	"fmt"
)

// DebitRequest asks the core-banking system to debit an account.
type DebitRequest struct {
	// IdempotencyKey is always the charge id. The core-banking API must
	// treat a repeat of the same key as the same debit: that is what closes
	// the crash window between a successful debit and the DONE record.
	IdempotencyKey string
	AccountID      string
	Amount         Money
	ChargeType     Type
	Narrative      string
}

// DebitReceipt is the core-banking system's answer to a successful debit.
type DebitReceipt struct {
	// Reference is the core-banking transaction reference.
	Reference string
}

// Debiter debits accounts (the core-banking port). An error that is
// errors.Is(err, ErrPermanent) (for example a *DeclineError) is a final
// refusal; any other error is transient and the debit will be retried with
// the same idempotency key.
type Debiter interface {
	Debit(ctx context.Context, req DebitRequest) (DebitReceipt, error)
}

// DebitState is what the bank knows of a debit, asked by its idempotency key.
type DebitState int

// The answers of a status enquiry.
const (
	// DebitNotFound: the bank never saw the key; posting is safe.
	DebitNotFound DebitState = iota + 1
	// DebitInProgress: a request with the key is still being processed.
	DebitInProgress
	// DebitPosted: the debit posted; Enquiry.Reference is its reference.
	DebitPosted
	// DebitDeclined: the bank declined it; Enquiry.Decline says why.
	DebitDeclined
)

func (s DebitState) String() string {
	switch s {
	case DebitNotFound:
		return "NOT_FOUND"
	case DebitInProgress:
		return "IN_PROGRESS"
	case DebitPosted:
		return "POSTED"
	case DebitDeclined:
		return "DECLINED"
	}
	return fmt.Sprintf("debit_state(%d)", int(s))
}

// Enquiry is the answer to a status enquiry.
type Enquiry struct {
	State     DebitState
	Reference string        // DebitPosted
	Decline   *DeclineError // DebitDeclined
}

// Enquirer asks the bank what became of a debit by its idempotency key
// (GET /v1/debits/{key}): the optional status-enquiry port. Its errors are
// classified like the Debiter's.
type Enquirer interface {
	Enquire(ctx context.Context, idempotencyKey string) (Enquiry, error)
}

// Notifier tells the customer about the debit (the pre-debit notification).
// Its failure never retries or reverses a debit.
type Notifier interface {
	NotifyPreDebit(ctx context.Context, c Charge, receipt DebitReceipt) error
}

// AdvanceNotifier tells the customer of a debit before it is made: the
// advance notice of notice-first mode (Options.NoticeLead). A nil error
// means the channel accepted the notice; any error means it may not have
// gone out, and then the charge is not debited (no notice, no debit): the
// notice is sent again later under the same NotificationKey, so that the
// channel can recognise a repeat.
type AdvanceNotifier interface {
	NotifyAdvance(ctx context.Context, n AdvanceNotice) error
}
