// Package operate holds what an operator does to one backend, shared by
// the command line (chargerecovery dlq, redrive, reopen, renotify) and the
// console: the DLQ as an operator sees it (charge, masked account, reason,
// copies), the redrive of chosen entries, a FAILED charge reopened, a
// missed notice sent again, and the purge of a DLQ entry. The command
// line's flows (ReopenCharge, Redrive, Renotifier.Renotify, PurgeDLQ,
// Show) write its reports and audit lines; nothing here parses flags.
package operate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/queue"
)

// Entry is one DLQ entry as an operator sees it: the charge it carries
// (account masked), why it is there, and how often (a forward repeated
// after a lost answer is one entry with Copies > 1).
type Entry struct {
	ID       string `json:"id"`
	ChargeID string `json:"chargeId,omitempty"`
	// Key is the charge id as the body holds it (ChargeIDOf), what its
	// record is looked up by; never shown: ChargeID is what is shown
	// (charge.ShowID).
	Key     string `json:"-"`
	Account string `json:"account,omitempty"`
	Amount  string `json:"amount,omitempty"`
	// Minor and Currency are Amount as integer minor units and its code.
	Minor        int64     `json:"-"`
	Currency     string    `json:"-"`
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
	// Size is the body's length in bytes, for an entry over the size
	// limit (which can only be purged).
	Size int `json:"sizeBytes,omitempty"`
}

// View is e as an operator sees it at now; withBody adds the masked body.
func View(e queue.DLQEntry, now time.Time, withBody bool) Entry {
	v := Entry{ID: e.ID, Code: string(e.Reason.Code), ReceiveCount: e.ReceiveCount,
		At: e.At.UTC(), Copies: 1, SourceID: e.SourceID}
	if !e.At.IsZero() {
		v.Age = now.Sub(e.At).Round(time.Second).Seconds()
	}
	// Every account the body names is masked in what the entry shows of
	// it, wherever it shows it.
	accounts := bodyAccounts(e.Body)
	v.Key = ChargeIDOf(e.Body)
	v.Detail = charge.Untrusted(e.Reason.Detail, accounts...)
	c, err := charge.ParseEvent(e.Body)
	switch {
	case e.TooLarge:
		v.Unreadable = fmt.Sprintf("the body (%d bytes) is over the %d-byte size limit and was not read; it cannot be redriven: remove it with chargerecovery dlq purge %s", e.Size, queue.MaxMessageBytes, e.ID)
		v.Size = e.Size
	case e.Body == nil:
		v.Unreadable = "the body is over the size limit and was not read"
	case err != nil:
		v.Unreadable = charge.Untrusted(err.Error(), accounts...)
		// The charge id of a body that is not a charge is the producer's
		// say: shown as an id is (charge.ShowID), the body's own account
		// masked in it.
		v.ChargeID = charge.ShowID(v.Key, accounts...)
		if a := accountOf(e.Body); a != "" {
			v.Account = charge.MaskAccount(a)
		}
	default:
		v.ChargeID, v.Account, v.Amount, v.Type = charge.ShowID(c.ID, accounts...), charge.MaskAccount(c.AccountID), c.Amount.String(), string(c.Type)
		v.Minor, v.Currency = c.Amount.Minor, string(c.Amount.Currency)
	}
	if withBody && e.Body != nil {
		v.Body = charge.Clip(MaskBody(e.Body), 16<<10)
	}
	return v
}

// MaskBody is a message body fit to show, masked by value, not by field
// name. Every value under a key that names an account (account, acct,
// iban, pan, card: any case, any depth, a repeated key as often as it
// comes, and whatever an object or array under such a key holds) is an
// account: it is masked with MaskAccount, and wherever else the same value
// occurs in the body (another field, a key, a text) it is masked too. A
// JSON body is written again token by token (duplicate keys and their
// order kept, escapes decoded, so no \u0039 hides a digit), every other
// key, string and number passed through MaskText, so any 8+ digit run,
// plain or grouped, keeps only its last four digits. A body that is not
// JSON (or not only JSON) is MaskText'ed whole, with the accounts read
// from it up to where it stops being JSON. Control characters are dropped.
func MaskBody(body []byte) string {
	accounts := bodyAccounts(body)
	if out, ok := maskJSON(body, accounts); ok {
		return charge.Printable(out)
	}
	return charge.MaskText(charge.Printable(string(body)), accounts...)
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

// accountLikeKey: a key inside a container under an account-like key that
// is itself an account ({"accounts":{"AB12CD34EF56":…}}): one with a
// digit. A name ("number", "iban") is left to read.
func accountLikeKey(tok json.Token) bool {
	s, ok := tok.(string)
	return ok && strings.ContainsAny(s, "0123456789")
}

// jsonWalker follows where Decoder.Token is in a body: whether the next
// token is a key, and whether it lies under an account-like key.
type jsonWalker struct {
	stack []jsonFrame
}

type jsonFrame struct {
	object  bool
	account bool   // the container lies under an account-like key
	n       int    // tokens read in this container
	key     string // the key of the value to come (objects)
}

// step classifies tok, read next: a key, or a value (under an account-like
// key or not); the separator to write before it (0 for none); and whether
// it closes a container.
func (w *jsonWalker) step(tok json.Token) (isKey, account bool, sep byte, closes bool) {
	var top *jsonFrame
	if len(w.stack) > 0 {
		top = &w.stack[len(w.stack)-1]
	}
	if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
		if top != nil { // the decoder never closes what it did not open
			w.stack = w.stack[:len(w.stack)-1]
		}
		return false, false, 0, true
	}
	if top != nil {
		isKey = top.object && top.n%2 == 0
		account = top.account || top.object && !isKey && accountKey(top.key)
		switch {
		case top.object && !isKey:
			sep = ':'
		case top.n > 0:
			sep = ','
		}
		if s, ok := tok.(string); ok && isKey {
			top.key = s
		}
		top.n++
	}
	if d, ok := tok.(json.Delim); ok {
		w.stack = append(w.stack, jsonFrame{object: d == '{', account: account})
	}
	return isKey, account, sep, false
}

func (w *jsonWalker) depth() int { return len(w.stack) }

// chargeID reports whether the value just stepped is the event's charge id:
// a top-level "chargeId" (any case, as the header reads it, ChargeIDOf).
func (w *jsonWalker) chargeID() bool {
	return len(w.stack) == 1 && w.stack[0].object && strings.EqualFold(w.stack[0].key, "chargeId")
}

// maxBodyAccounts bounds the accounts of one body searched for in all of
// it (each string of the body is searched for each): a body naming more
// still has each masked where it stands under its key, and every 8+ digit
// run masked anyway.
const maxBodyAccounts = 64

// bodyAccounts are the values under account-like keys, read token by
// token as far as the body is JSON (a body that is not an event, or not
// JSON from some point on, still names its accounts up to there): each
// decoded, and as written when the body escapes it, longest first (so
// that one account within another is masked as part of the longer).
func bodyAccounts(body []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var w jsonWalker
	seen := map[string]bool{}
	var accounts []string
	add := func(a string) {
		if len(a) >= 4 && !seen[a] && len(accounts) < maxBodyAccounts {
			seen[a] = true
			accounts = append(accounts, a)
		}
	}
	for {
		from := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			break
		}
		isKey, account, _, _ := w.step(tok)
		if !account || isKey && !accountLikeKey(tok) {
			continue
		}
		switch v := tok.(type) {
		case string:
			add(v)
			add(charge.Printable(v)) // as the masking sees it
			if raw, ok := rawString(body, from, dec.InputOffset()); ok && raw != v {
				add(raw)
			}
		case json.Number:
			add(v.String())
		}
	}
	slices.SortStableFunc(accounts, func(a, b string) int { return len(b) - len(a) })
	return accounts
}

// rawString is the string token that ends at body[end], as written
// (escapes and all, without its quotes), from is where the token's read
// began (before any ',' ':' or space in front of it).
func rawString(body []byte, from, end int64) (string, bool) {
	if from < 0 || end > int64(len(body)) || from >= end {
		return "", false
	}
	tok := body[from:end]
	q := bytes.IndexByte(tok, '"')
	if q < 0 || len(tok)-q < 2 || tok[len(tok)-1] != '"' {
		return "", false
	}
	return string(tok[q+1 : len(tok)-1]), true
}

// maskJSON writes body again with its values masked; ok is false when
// body is not one JSON value (and space) throughout. Not a stream of
// values: "1234 5678 9012" is three JSON numbers, each too short to mask,
// that would be written again as one.
func maskJSON(body []byte, accounts []string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var w jsonWalker
	var b strings.Builder
	done := false // one whole value has been read
	// text is a key or a value not under an account-like key: printable
	// first (a dropped control character must not join two digit runs
	// after they were masked apart), then masked.
	text := func(s string) string { return charge.MaskText(charge.Printable(s), accounts...) }
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil || done {
			return "", false
		}
		isKey, account, sep, closes := w.step(tok)
		if closes {
			b.WriteByte(byte(tok.(json.Delim)))
			done = w.depth() == 0
			continue
		}
		done = w.depth() == 0 // a whole value, unless it opened one
		if sep != 0 {
			b.WriteByte(sep)
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteByte(byte(v))
		case string:
			switch {
			case account && (!isKey || accountLikeKey(v)):
				writeString(&b, charge.MaskAccount(charge.Printable(v)))
			case !isKey && w.chargeID():
				// An id, shown as the entry's header shows it.
				writeString(&b, charge.ShowID(v, accounts...))
			default:
				writeString(&b, text(v))
			}
		case json.Number:
			if account {
				writeString(&b, charge.MaskAccount(v.String()))
			} else if m := text(v.String()); m != v.String() {
				writeString(&b, m) // masked, a number no more
			} else {
				b.WriteString(m)
			}
		default: // bool, nil
			b.WriteString(jsonLiteral(v))
		}
	}
	if w.depth() != 0 || b.Len() == 0 {
		return "", false
	}
	return b.String(), true
}

// writeString writes s as a JSON string, '<', '>' and '&' as they are.
func writeString(b *strings.Builder, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
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
	// Keep, when not 0, keeps only the Keep oldest entries (a page's
	// worth): the listing holds about twice that at most, however large
	// the DLQ, and Total counts them all.
	Keep int
}

// Listing is what List found.
type Listing struct {
	Entries []Entry // oldest first
	// Unseen is how many DLQ messages the listing could not see (SQS:
	// held invisible by another reader for longer than it waited): the
	// listing is incomplete when it is not 0. Approximate says Unseen is
	// the queue's estimate (SQS), not an exact count.
	Unseen      int
	Approximate bool
	// Total is how many entries were chosen, Entries holding all of them
	// or, with ListOptions.Keep, the oldest Keep (a repeated forward of
	// an entry past those kept may count once more).
	Total int
}

// Incomplete says what a listing with unseen entries missed, "" when it
// saw everything.
func (l Listing) Incomplete() string {
	return UnseenNote(l.Unseen, l.Approximate)
}

// UnseenNote says what a DLQ read that could not see n messages missed,
// "" for none.
func UnseenNote(n int, approximate bool) string {
	if n == 0 {
		return ""
	}
	if approximate {
		return fmt.Sprintf("incomplete: about %d DLQ message(s) could not be seen (another reader held them invisible for longer than this one waited; SQS counts are approximate); run it again", n)
	}
	return fmt.Sprintf("incomplete: %d DLQ message(s) could not be seen (another reader held them); run it again", n)
}

// List visits every DLQ entry that o accepts, without moving any, folds
// repeated forwards (one source message) into one entry, and returns them
// oldest first, with how many it could not see.
func List(ctx context.Context, q queue.Operator, o ListOptions) (Listing, error) {
	var out []Entry
	bySource := map[string]int{}
	total := 0
	oldest := func(a, b Entry) int { return a.At.Compare(b.At) }
	// keepOldest drops all but the Keep oldest entries (and their
	// sources: a later copy of a dropped entry is counted as one more).
	keepOldest := func() {
		slices.SortStableFunc(out, oldest)
		out = slices.Clone(out[:o.Keep])
		clear(bySource)
		for i, e := range out {
			if e.SourceID != "" {
				bySource[e.SourceID] = i
			}
		}
	}
	ro := queue.RedriveOptions{DryRun: true, Force: true, Codes: o.Codes, Match: o.Match, Before: o.Before, Now: o.Now}
	ro.Visit = func(e queue.DLQEntry, d queue.RedriveDecision) {
		if d == queue.Skip {
			return
		}
		if i, ok := bySource[e.SourceID]; ok && e.SourceID != "" {
			out[i].Copies++
			return
		}
		total++
		if o.Keep > 0 && len(out) >= 2*o.Keep {
			keepOldest()
			if !e.At.Before(out[len(out)-1].At) {
				return // newer than every entry kept: not shown
			}
		}
		if e.SourceID != "" {
			bySource[e.SourceID] = len(out)
		}
		out = append(out, View(e, o.Now, o.Bodies))
	}
	rep, err := q.Redrive(ctx, ro)
	if err != nil {
		return Listing{}, err
	}
	if o.Keep > 0 && len(out) > o.Keep {
		keepOldest()
	}
	slices.SortStableFunc(out, oldest)
	return Listing{Entries: out, Unseen: rep.Unseen, Approximate: rep.Approximate, Total: total}, nil
}
