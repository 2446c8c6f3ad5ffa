package charge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/internal/strictjson"
)

// MaxEventBytes is the largest ChargeDueEvent body accepted. A real event is
// about 200 bytes; anything near this size is not one.
const MaxEventBytes = 16 << 10

// SchemaVersion is the wire-format version this package reads and writes.
const SchemaVersion = 1

// wireEvent is the JSON form of a ChargeDueEvent (see docs/operations/wire-format.md).
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
//
// An error names the field and what is wrong with it, never the value: a
// producer that shifts its fields puts an account number where a currency,
// an amount or a date should be, and the reason goes to logs and the DLQ.
// (An unknown field's name is data too: it is given masked, MaskText.)
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
		return Charge{}, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Charge{}, invalid("", "trailing data after the JSON object")
	}
	return w.charge()
}

func (w *wireEvent) charge() (Charge, error) {
	if w.SchemaVersion != nil && *w.SchemaVersion != SchemaVersion {
		return Charge{}, invalid("schemaVersion", "not a supported version (want %d)", SchemaVersion)
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
		return Charge{}, invalid("amount.currency", "not an ISO-4217 currency code")
	}
	t := Type(w.ChargeType)
	if w.ChargeType == "" {
		return Charge{}, invalid("chargeType", "missing or empty")
	}
	if !t.Valid() {
		return Charge{}, invalid("chargeType", "not one of %v", Types)
	}
	if w.DueDate == "" {
		return Charge{}, invalid("dueDate", "missing or empty")
	}
	due, err := time.Parse(time.DateOnly, w.DueDate)
	if err != nil {
		return Charge{}, invalid("dueDate", "not a date YYYY-MM-DD")
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
		return 0, invalid(field, "overflows a 64-bit integer")
	}
	if err != nil {
		return 0, invalid(field, "not an integer number of minor units")
	}
	if n <= 0 {
		return 0, invalid(field, "must be positive")
	}
	return n, nil
}

// eventSchema is the wire format's field names, spelt exactly.
// encoding/json matches field names case-insensitively; strictjson makes any
// other spelling (and any repeat) an error first.
var eventSchema = &strictjson.Object{
	Fields: map[string]bool{"schemaVersion": true, "chargeId": true, "accountId": true, "amount": true, "chargeType": true, "dueDate": true},
	Nested: map[string]*strictjson.Object{"amount": {Fields: map[string]bool{"minor": true, "currency": true}}},
}

// checkFieldNames refuses an object that names a field twice (encoding/json
// would silently keep the last, and an amount given twice is not something
// to guess about) or names a field in any spelling but the exact one
// ("AMOUNT", "accountID"): a case-sensitive reader, such as the producer's
// validator or an audit tool, would read another value than we do. Syntax
// errors are left to the real decode.
func checkFieldNames(body []byte) error {
	var ke *strictjson.KeyError
	if err := strictjson.CheckKeys(body, eventSchema); errors.As(err, &ke) {
		if ke.Repeated {
			return invalid(fieldName(ke.Path), "field appears more than once")
		}
		return invalid(fieldName(ke.Path), "unknown field (field names are case-sensitive)")
	}
	return nil
}

// fieldName is a field name read from a body, fit to name in an error: a
// name the schema does not know is the sender's text (an account number
// given as a key, {"001234567890":…}), masked as such text is, without
// control characters, and cut to 64 bytes.
func fieldName(path string) string {
	return Clip(MaskText(Printable(path)), 64)
}

// decodeError is the error of a body encoding/json would not decode, by
// field where it says which, never quoting a value (its own errors quote
// a number given for a string: "cannot unmarshal number 001234567890").
func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		want := "a JSON string"
		switch te.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			want = "a JSON integer"
		case reflect.Struct, reflect.Pointer, reflect.Map:
			want = "a JSON object"
		}
		got, _, _ := strings.Cut(te.Value, " ") // "number 1.5" → "number"
		if got == "" {
			got = "value"
		}
		if te.Field == "" {
			return invalid("", "not a ChargeDueEvent JSON object (a %s)", jsonKind(got))
		}
		return invalid(fieldName(te.Field), "must be %s, not a %s", want, jsonKind(got))
	case errors.As(err, &se):
		return invalid("", "not a ChargeDueEvent JSON object: a syntax error at byte %d", se.Offset)
	case errors.Is(err, io.EOF):
		return invalid("", "not a ChargeDueEvent JSON object: empty body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "not a ChargeDueEvent JSON object: the body ends inside it")
	}
	return invalid("", "not a ChargeDueEvent JSON object")
}

// jsonKind names what encoding/json says it found, and only that: one of
// its words for a JSON value, else "value".
func jsonKind(word string) string {
	switch word {
	case "string", "number", "bool", "array", "object":
		return word
	}
	return "value"
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
