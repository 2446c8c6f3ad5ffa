package charge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"
)

// MaxEventBytes is the largest ChargeDueEvent body accepted. A real event is
// about 200 bytes; anything near this size is not one.
const MaxEventBytes = 16 << 10

// SchemaVersion is the wire-format version this package reads and writes.
const SchemaVersion = 1

// wireEvent is the JSON form of a ChargeDueEvent (see the README).
type wireEvent struct {
	SchemaVersion *int       `json:"schemaVersion,omitempty"`
	ChargeID      string     `json:"chargeId"`
	AccountID     string     `json:"accountId"`
	Amount        *wireMoney `json:"amount"`
	ChargeType    string     `json:"chargeType"`
	DueDate       string     `json:"dueDate"`
}

type wireMoney struct {
	Minor    json.RawMessage `json:"minor"`
	Currency string          `json:"currency"`
}

var (
	chargeIDPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)
	accountIDPattern = regexp.MustCompile(`^[A-Za-z0-9]{4,34}$`)
)

func invalid(field, format string, args ...any) error {
	return &InvalidEventError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ParseEvent reads a ChargeDueEvent strictly: one JSON object, field names
// spelt exactly (case-sensitive), no unknown or repeated fields, every field
// present and valid. Every error it returns is
// an *InvalidEventError (errors.Is(err, ErrInvalidEvent)) saying which field
// is wrong, so the listener can dead-letter the message with that reason.
func ParseEvent(body []byte) (Charge, error) {
	if len(body) > MaxEventBytes {
		return Charge{}, invalid("", "body is %d bytes, the limit is %d", len(body), MaxEventBytes)
	}
	if !utf8.Valid(body) {
		return Charge{}, invalid("", "body is not valid UTF-8")
	}
	if err := checkFieldNames(body); err != nil {
		return Charge{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var w wireEvent
	if err := dec.Decode(&w); err != nil {
		return Charge{}, invalid("", "not a ChargeDueEvent JSON object: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Charge{}, invalid("", "trailing data after the JSON object")
	}
	return w.charge()
}

func (w *wireEvent) charge() (Charge, error) {
	if w.SchemaVersion != nil && *w.SchemaVersion != SchemaVersion {
		return Charge{}, invalid("schemaVersion", "version %d is not supported (want %d)", *w.SchemaVersion, SchemaVersion)
	}
	if w.ChargeID == "" {
		return Charge{}, invalid("chargeId", "missing or empty")
	}
	if !chargeIDPattern.MatchString(w.ChargeID) {
		return Charge{}, invalid("chargeId", "must be 1-128 characters of A-Z a-z 0-9 . _ : / - starting with a letter or digit")
	}
	if w.AccountID == "" {
		return Charge{}, invalid("accountId", "missing or empty")
	}
	if !accountIDPattern.MatchString(w.AccountID) {
		return Charge{}, invalid("accountId", "must be 4-34 letters or digits")
	}
	if w.Amount == nil {
		return Charge{}, invalid("amount", "missing")
	}
	minor, err := parseMinor(w.Amount.Minor)
	if err != nil {
		return Charge{}, err
	}
	cur := Currency(w.Amount.Currency)
	if cur == "" {
		return Charge{}, invalid("amount.currency", "missing or empty")
	}
	if !cur.Valid() {
		return Charge{}, invalid("amount.currency", "%q is not an ISO-4217 currency code", w.Amount.Currency)
	}
	t := Type(w.ChargeType)
	if w.ChargeType == "" {
		return Charge{}, invalid("chargeType", "missing or empty")
	}
	if !t.Valid() {
		return Charge{}, invalid("chargeType", "%q is not one of %v", w.ChargeType, Types)
	}
	if w.DueDate == "" {
		return Charge{}, invalid("dueDate", "missing or empty")
	}
	due, err := time.Parse(time.DateOnly, w.DueDate)
	if err != nil {
		return Charge{}, invalid("dueDate", "%q is not a date YYYY-MM-DD", w.DueDate)
	}
	return Charge{
		ID:        w.ChargeID,
		AccountID: w.AccountID,
		Amount:    Money{Minor: minor, Currency: cur},
		Type:      t,
		DueDate:   due,
	}, nil
}

// parseMinor accepts only a JSON integer literal: no string, no fraction, no
// exponent, nothing that overflows int64, nothing below 1.
func parseMinor(raw json.RawMessage) (int64, error) {
	const field = "amount.minor"
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, invalid(field, "missing")
	}
	if s[0] == '"' {
		return 0, invalid(field, "must be a JSON integer, not a string")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, invalid(field, "%s overflows a 64-bit integer", s)
	}
	if err != nil {
		return 0, invalid(field, "%s is not an integer number of minor units", s)
	}
	if n <= 0 {
		return 0, invalid(field, "%d is not positive", n)
	}
	return n, nil
}

// The field names of the wire format, spelt exactly. encoding/json matches
// field names case-insensitively; checkFieldNames makes any other spelling
// an unknown field first.
var (
	eventFields  = map[string]bool{"schemaVersion": true, "chargeId": true, "accountId": true, "amount": true, "chargeType": true, "dueDate": true}
	amountFields = map[string]bool{"minor": true, "currency": true}
)

// checkFieldNames refuses an object that names a field twice (encoding/json
// would silently keep the last, and an amount given twice is not something
// to guess about) or names a field in any spelling but the exact one
// ("AMOUNT", "accountID"): a case-sensitive reader, such as the producer's
// validator or an audit tool, would read another value than we do.
//
// It walks the body's structure by hand, allocating only for an object's
// key set: json.Decoder.Token cost about half of all allocations per
// message. At the first malformed byte it stops and says nothing: syntax
// errors are reported by the real decode. The differential fuzz target
// (FuzzParseEventDifferential) holds it to a case-sensitive reader.
func checkFieldNames(body []byte) error {
	w := keyWalker{b: body}
	for {
		w.space()
		if w.i >= len(w.b) {
			return nil
		}
		// Each top-level value of the stream is an event (a second one is
		// refused by the decode; its field names are checked the same way).
		ok, err := w.value(0, eventFields, "", true)
		if err != nil || !ok {
			return err
		}
	}
}

// keyWalker is checkFieldNames' scanner over one body.
type keyWalker struct {
	b []byte
	i int
}

// maxKeyDepth stops the walk where encoding/json stops decoding.
const maxKeyDepth = 10000

func (w *keyWalker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value walks one JSON value. allowed and path apply when it is an object
// (allowed nil: names not checked, only repeats); event marks the event
// itself, whose "amount" object is checked against amountFields. ok is
// false at a syntax error.
func (w *keyWalker) value(depth int, allowed map[string]bool, path string, event bool) (ok bool, err error) {
	if depth > maxKeyDepth {
		return false, nil
	}
	w.space()
	if w.i >= len(w.b) {
		return false, nil
	}
	switch c := w.b[w.i]; {
	case c == '{':
		return w.object(depth, allowed, path, event)
	case c == '[':
		w.i++
		w.space()
		if w.i < len(w.b) && w.b[w.i] == ']' {
			w.i++
			return true, nil
		}
		for {
			if ok, err := w.value(depth+1, nil, "", false); err != nil || !ok {
				return false, err
			}
			if more, ok := w.after(']'); !more {
				return ok, nil
			}
		}
	case c == '"':
		_, ok := w.str()
		return ok, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return w.number(), nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(w.b[w.i:], []byte(lit)) {
				w.i += len(lit)
				return true, nil
			}
		}
		return false, nil
	}
}

func (w *keyWalker) object(depth int, allowed map[string]bool, path string, event bool) (bool, error) {
	w.i++ // '{'
	w.space()
	if w.i < len(w.b) && w.b[w.i] == '}' {
		w.i++
		return true, nil
	}
	var seen []string // objects here have a handful of keys: a slice beats a map
	for {
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != '"' {
			return false, nil
		}
		raw, ok := w.str()
		if !ok {
			return false, nil
		}
		key, ok := keyName(raw)
		if !ok {
			return false, nil
		}
		name := key
		if path != "" {
			name = path + "." + key
		}
		if allowed != nil && !allowed[key] {
			return false, invalid(name, "unknown field (field names are case-sensitive)")
		}
		for _, k := range seen {
			if k == key {
				return false, invalid(name, "field appears more than once")
			}
		}
		seen = append(seen, key)
		w.space()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			return false, nil
		}
		w.i++
		childAllowed, childPath := map[string]bool(nil), ""
		if event && key == "amount" {
			childAllowed, childPath = amountFields, "amount"
		}
		if ok, err := w.value(depth+1, childAllowed, childPath, false); err != nil || !ok {
			return false, err
		}
		if more, ok := w.after('}'); !more {
			return ok, nil
		}
	}
}

// after reads what follows an element of an array or object: a comma
// (more: another element) or the closing byte (ok: the container ended);
// anything else is a syntax error (neither).
func (w *keyWalker) after(closing byte) (more, ok bool) {
	w.space()
	if w.i >= len(w.b) {
		return false, false
	}
	switch w.b[w.i] {
	case ',':
		w.i++
		return true, false
	case closing:
		w.i++
		return false, true
	}
	return false, false
}

// str walks a string and returns it with its quotes, undecoded.
func (w *keyWalker) str() ([]byte, bool) {
	start := w.i
	w.i++ // opening quote
	for w.i < len(w.b) {
		switch c := w.b[w.i]; {
		case c == '"':
			w.i++
			return w.b[start:w.i], true
		case c == '\\':
			w.i += 2
		case c < 0x20:
			return nil, false
		default:
			w.i++
		}
	}
	return nil, false
}

// keyName decodes a key as encoding/json does: escapes resolved, invalid
// UTF-8 replaced; the common plain ASCII key costs one small string.
func keyName(quoted []byte) (string, bool) {
	inner := quoted[1 : len(quoted)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(inner), true
	}
	var k string
	if err := json.Unmarshal(quoted, &k); err != nil {
		return "", false
	}
	return k, true
}

// number walks a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *keyWalker) number() bool {
	digits := func() int {
		n := 0
		for w.i < len(w.b) && w.b[w.i] >= '0' && w.b[w.i] <= '9' {
			w.i++
			n++
		}
		return n
	}
	if w.b[w.i] == '-' {
		w.i++
	}
	if w.i < len(w.b) && w.b[w.i] == '0' {
		w.i++
	} else if digits() == 0 {
		return false
	}
	if w.i < len(w.b) && w.b[w.i] == '.' {
		w.i++
		if digits() == 0 {
			return false
		}
	}
	if w.i < len(w.b) && (w.b[w.i] == 'e' || w.b[w.i] == 'E') {
		w.i++
		if w.i < len(w.b) && (w.b[w.i] == '+' || w.b[w.i] == '-') {
			w.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// MarshalEvent renders c as a ChargeDueEvent body.
func MarshalEvent(c Charge) ([]byte, error) {
	v := SchemaVersion
	return json.Marshal(wireEvent{
		SchemaVersion: &v,
		ChargeID:      c.ID,
		AccountID:     c.AccountID,
		Amount: &wireMoney{
			Minor:    json.RawMessage(strconv.FormatInt(c.Amount.Minor, 10)),
			Currency: string(c.Amount.Currency),
		},
		ChargeType: string(c.Type),
		DueDate:    c.DueDate.Format(time.DateOnly),
	})
}
