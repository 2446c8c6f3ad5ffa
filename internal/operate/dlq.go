// Package operate holds what an operator does to one backend, shared by
// the command line (chargerecovery dlq, redrive, renotify) and the console:
// the DLQ as an operator sees it (charge, masked account, reason, copies),
// the redrive of chosen entries, and a missed notice sent again. Nothing
// here prints or parses flags.
package operate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
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

// MaskBody is a message body fit to show, masked by value, not by field
// name: a JSON body is written again token by token (duplicate keys and
// their order kept, escapes decoded, so no \u0039 hides a digit) with
// every string under a key that names an account (account, acct, iban,
// pan, …) masked as an account and every other string and number passed
// through MaskText (any 8+ digit run keeps its last four); a body that is
// not JSON is MaskText'ed whole. Control characters are dropped.
func MaskBody(body []byte) string {
	if out, ok := maskJSON(body); ok {
		return charge.Printable(out)
	}
	return charge.MaskText(charge.Printable(string(body)))
}

// accountKey: a JSON key whose value is an account number.
func accountKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"account", "acct", "iban", "pan", "card"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// maskJSON writes body again with its values masked; ok is false when
// body is not one JSON value.
func maskJSON(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object bool
		n      int    // tokens written in this container
		key    string // the key of the value to come (objects)
	}
	var stack []frame
	var b strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", false
		}
		top := (*frame)(nil)
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			b.WriteByte(byte(d))
			stack = stack[:len(stack)-1]
			continue
		}
		isKey := top != nil && top.object && top.n%2 == 0
		if top != nil {
			switch {
			case top.object && isKey && top.n > 0:
				b.WriteByte(',')
			case top.object && !isKey:
				b.WriteByte(':')
			case !top.object && top.n > 0:
				b.WriteByte(',')
			}
		}
		underAccount := top != nil && top.object && !isKey && accountKey(top.key)
		switch v := tok.(type) {
		case json.Delim:
			b.WriteByte(byte(v))
			if top != nil {
				top.n++
			}
			stack = append(stack, frame{object: v == '{'})
			continue
		case string:
			switch {
			case isKey:
				top.key = v
				writeString(&b, charge.MaskText(v))
			case underAccount:
				writeString(&b, charge.MaskAccount(v))
			default:
				writeString(&b, charge.MaskText(v))
			}
		case json.Number:
			if underAccount {
				b.WriteString(strconv.Quote(charge.MaskAccount(v.String())))
			} else if m := charge.MaskText(v.String()); m != v.String() {
				b.WriteString(strconv.Quote(m)) // masked, a number no more
			} else {
				b.WriteString(m)
			}
		default: // bool, nil
			fmt.Fprint(&b, jsonLiteral(v))
		}
		if top != nil {
			top.n++
		}
	}
	if len(stack) != 0 || b.Len() == 0 {
		return "", false
	}
	return b.String(), true
}

func writeString(b *strings.Builder, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

func jsonLiteral(v any) string {
	switch v {
	case true:
		return "true"
	case false:
		return "false"
	}
	return "null"
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
