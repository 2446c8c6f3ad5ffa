// Package operate holds what an operator does to one backend, shared by
// the command line (chargerecovery dlq, redrive, renotify) and the console:
// the DLQ as an operator sees it (charge, masked account, reason, copies),
// the redrive of chosen entries, and a missed notice sent again. Nothing
// here prints or parses flags.
package operate

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/queue"
)

// Entry is one DLQ entry as an operator sees it: the charge it carries
// (account masked), why it is there, and how often (a forward repeated
// after a lost answer is one entry with Copies > 1).
type Entry struct {
	ID           string    `json:"id"`
	ChargeID     string    `json:"chargeId,omitempty"`
	Account      string    `json:"account,omitempty"`
	Amount       string    `json:"amount,omitempty"`
	Type         string    `json:"type,omitempty"`
	Code         string    `json:"code"`
	Detail       string    `json:"detail,omitempty"`
	ReceiveCount int       `json:"receiveCount"`
	At           time.Time `json:"deadLetteredAt"`
	Age          float64   `json:"ageSeconds"`
	Copies       int       `json:"copies"`
	SourceID     string    `json:"sourceMessageId,omitempty"`
	// Body is the message, account numbers masked (with ListOptions.Bodies).
	Body string `json:"body,omitempty"`
	// Unreadable says why the body is not a ChargeDueEvent.
	Unreadable string `json:"unreadable,omitempty"`
}

// View is e as an operator sees it at now; withBody adds the masked body.
func View(e queue.DLQEntry, now time.Time, withBody bool) Entry {
	v := Entry{ID: e.ID, Code: string(e.Reason.Code), Detail: charge.Untrusted(e.Reason.Detail), ReceiveCount: e.ReceiveCount,
		At: e.At.UTC(), Copies: 1, SourceID: e.SourceID}
	if !e.At.IsZero() {
		v.Age = now.Sub(e.At).Round(time.Second).Seconds()
	}
	c, err := charge.ParseEvent(e.Body)
	switch {
	case e.Body == nil:
		v.Unreadable = "the body is over the size limit and was not read"
	case err != nil:
		v.Unreadable = charge.Untrusted(err.Error())
		v.ChargeID = ChargeIDOf(e.Body)
		if a := accountOf(e.Body); a != "" {
			v.Account = charge.MaskAccount(a)
		}
	default:
		v.ChargeID, v.Account, v.Amount, v.Type = c.ID, charge.MaskAccount(c.AccountID), c.Amount.String(), string(c.Type)
	}
	if withBody && e.Body != nil {
		v.Body = charge.Clip(MaskBody(e.Body), 16<<10)
	}
	return v
}

// MaskBody is a message body fit to show: its account number masked where
// it can be found (the accountId field), else every long number in it.
func MaskBody(body []byte) string {
	text := charge.Printable(string(body))
	if a := accountOf(body); len(a) >= 4 {
		return strings.ReplaceAll(text, a, charge.MaskAccount(a))
	}
	return charge.MaskText(text)
}

// accountOf is the accountId of a body, valid event or not.
func accountOf(body []byte) string {
	var w struct {
		AccountID string `json:"accountId"`
	}
	if json.Unmarshal(body, &w) != nil {
		return ""
	}
	return w.AccountID
}

// ChargeIDOf is the chargeId of a body, valid event or not (a conflict or
// an invalid amount still names its charge), printable and bounded; "" if
// it names none.
func ChargeIDOf(body []byte) string {
	var w struct {
		ChargeID string `json:"chargeId"`
	}
	if json.Unmarshal(body, &w) != nil {
		return ""
	}
	return charge.Clip(charge.Printable(w.ChargeID), 128)
}

// UnknownCode returns the first of codes that is not a reason code a DLQ
// entry may carry, and whether there was one.
func UnknownCode(codes []queue.Code) (queue.Code, bool) {
	known := chargehandler.DLQCodes()
	for _, c := range codes {
		if !slices.Contains(known, c) {
			return c, true
		}
	}
	return "", false
}

// ChargeMatch accepts entries whose body names one of ids (nil: all).
func ChargeMatch(ids []string) func(queue.DLQEntry) bool {
	if len(ids) == 0 {
		return nil
	}
	return func(e queue.DLQEntry) bool {
		id := ChargeIDOf(e.Body)
		return id != "" && slices.Contains(ids, id)
	}
}

// ListOptions choose the entries List returns.
type ListOptions struct {
	Codes []queue.Code // only these reason codes (none: every code)
	Match func(queue.DLQEntry) bool
	// Before: only entries dead-lettered before it (zero: all).
	Before time.Time
	Bodies bool // include each masked body
	Now    time.Time
}

// List visits every DLQ entry that o accepts, without moving any, folds
// repeated forwards (one source message) into one entry, and returns them
// oldest first.
func List(ctx context.Context, q queue.Operator, o ListOptions) ([]Entry, error) {
	var out []Entry
	bySource := map[string]int{}
	ro := queue.RedriveOptions{DryRun: true, Force: true, Codes: o.Codes, Match: o.Match, Before: o.Before, Now: o.Now}
	ro.Visit = func(e queue.DLQEntry, d queue.RedriveDecision) {
		if d == queue.Skip {
			return
		}
		if i, ok := bySource[e.SourceID]; ok && e.SourceID != "" {
			out[i].Copies++
			return
		}
		if e.SourceID != "" {
			bySource[e.SourceID] = len(out)
		}
		out = append(out, View(e, o.Now, o.Bodies))
	}
	if _, err := q.Redrive(ctx, ro); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.At.Compare(b.At) })
	return out, nil
}
