// Package charge is the domain of pre-debit charge recovery: a bank is owed
// a fee (an SMS alert fee, a cheque-book fee, locker rent), the consumer
// debits the customer's account through the core-banking API and sends a
// pre-debit notification, exactly once per charge however often the queue
// delivers it.
//
// The package imports only the standard library and this module's
// idempotency package. It defines the ports it needs (Debiter, Notifier) and
// the Service that runs claim → debit → notify → done.
package charge

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// Type is the kind of fee.
type Type string

// The fee types the bank recovers.
const (
	SMSAlertFee   Type = "SMS_ALERT_FEE"
	ChequeBookFee Type = "CHEQUE_BOOK_FEE"
	LockerRent    Type = "LOCKER_RENT"
)

// Types lists every valid Type.
var Types = []Type{SMSAlertFee, ChequeBookFee, LockerRent}

// Valid reports whether t is a known fee type.
func (t Type) Valid() bool {
	for _, v := range Types {
		if t == v {
			return true
		}
	}
	return false
}

// Charge is one fee owed by one account. ID is the business key of the
// billing system: the idempotency key here and at the core-banking API.
type Charge struct {
	ID        string
	AccountID string
	Amount    Money
	Type      Type
	// DueDate is a calendar date, at midnight UTC.
	DueDate time.Time
}

// Fingerprint identifies the business payload: the same ID with another
// fingerprint is a different charge reusing an id, a conflict.
func (c Charge) Fingerprint() string {
	return fingerprint(c.AccountID, c.Amount, c.Type, c.DueDate)
}

// DebitRequest is the request that debits c; every attempt sends the same
// one, keyed by the charge id.
func (c Charge) DebitRequest() DebitRequest {
	return c.DebitRequestFor(1)
}

// DebitRequestFor is the debit request of the charge's key generation gen
// (see BankKey).
func (c Charge) DebitRequestFor(gen int) DebitRequest {
	return DebitRequest{
		IdempotencyKey: BankKey(c.ID, gen),
		AccountID:      c.AccountID,
		Amount:         c.Amount,
		ChargeType:     c.Type,
		Narrative:      fmt.Sprintf("%s %s", c.Type, c.DueDate.Format(time.DateOnly)),
	}
}

// LogValue masks the account number so that no log line ever holds it whole.
func (c Charge) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("charge_id", c.ID),
		slog.String("account", MaskAccount(c.AccountID)),
		slog.String("amount", c.Amount.String()),
		slog.String("type", string(c.Type)),
		slog.String("due_date", c.DueDate.Format(time.DateOnly)),
	)
}

// MaskAccount keeps the last four characters of an account number and
// masks the rest; an account of four characters or fewer is masked whole.
func MaskAccount(acct string) string {
	r := []rune(acct)
	if len(r) <= 4 {
		return "****"
	}
	out := make([]rune, len(r))
	for i := range r {
		if i < len(r)-4 {
			out[i] = '*'
		} else {
			out[i] = r[i]
		}
	}
	return string(out)
}

// Status is the recorded result of a charge.
type Status string

// The recorded results.
const (
	// Debited: the debit succeeded and the notification was sent.
	Debited Status = "DEBITED"
	// DebitedNotificationFailed: the debit succeeded and the notification
	// did not. Money moved; the debit is never retried or reversed for it.
	DebitedNotificationFailed Status = "DEBITED_NOTIFICATION_FAILED"
	// Failed: the core-banking system declined the debit permanently.
	Failed Status = "FAILED"
)

// MaskText masks what may be an account number in text that came from
// outside (a bank's error message): every occurrence of the given account
// numbers, and every run of 8 or more digits, keeps its last four
// characters. Our own references and ids are not passed through it.
func MaskText(text string, accounts ...string) string {
	for _, a := range accounts {
		if len(a) >= 4 && strings.Contains(text, a) {
			text = strings.ReplaceAll(text, a, MaskAccount(a))
		}
	}
	var b strings.Builder
	run := 0
	flush := func(end int) {
		if run >= 8 {
			b.WriteString(strings.Repeat("*", run-4))
			b.WriteString(text[end-4 : end])
		} else {
			b.WriteString(text[end-run : end])
		}
		run = 0
	}
	for i := 0; i < len(text); i++ {
		if c := text[i]; c >= '0' && c <= '9' {
			run++
			continue
		}
		flush(i)
		b.WriteByte(text[i])
	}
	flush(len(text))
	return b.String()
}

// Clip shortens text from outside to at most n bytes, cut on a rune
// boundary, marking a cut with "…".
func Clip(text string, n int) string {
	if len(text) <= n {
		return text
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}

// GenerationSeparator joins a charge id and its key generation. Charge ids
// cannot contain it (see ParseEvent), so no generation's key can equal
// another charge's id.
const GenerationSeparator = "~"

// BankKey is the core-banking idempotency key of generation gen of the
// charge: the charge id itself for the first, "<id>~<gen>" for the ones
// an operator opened after an explicit decline (whose answer is final at
// the bank under the old key).
func BankKey(chargeID string, gen int) string {
	if gen <= 1 {
		return chargeID
	}
	return chargeID + GenerationSeparator + strconv.Itoa(gen)
}

// DeclinedDetail reports whether a FAILED record's detail is an explicit
// decline by the bank (what the Service records for a *DeclineError), the
// only failure that may be retried under a new key generation.
func DeclinedDetail(detail string) bool { return strings.HasPrefix(detail, declinedPrefix) }

// EligibleForNewGeneration is the rule for idempotency.ReopenOptions: only
// a FAILED record whose failure was an explicit decline gets a new bank
// key; an ambiguous outcome never does (it is never FAILED in the first
// place, and a FAILED record of any other cause keeps its key).
func EligibleForNewGeneration(r idempotency.Record) error {
	if r.State != idempotency.StateFailed || !DeclinedDetail(r.Detail) {
		return fmt.Errorf("%s failed with %q, not an explicit decline by the bank: a new key is only for a decline, whose answer is final under the old one", r.Key, Clip(r.Detail, 120))
	}
	return nil
}
