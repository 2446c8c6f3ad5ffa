package charge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"unicode/utf8"
)

// referenceParse is an independent, strictly case-sensitive reader of the
// wire format, for the differential fuzz test: it walks the token stream
// itself, takes a field only under its exact name, refuses any other name,
// a repeated name and trailing data, and reads each value by the rules of
// its Go type (a string field takes a string or null, schemaVersion an
// integer or null, amount an object or null). It then applies the same
// field validation (wireEvent.charge). What it must agree with ParseEvent
// on is the mapping from bytes to fields: accept/reject and every value.
func referenceParse(body []byte) (Charge, bool) {
	if len(body) > MaxEventBytes || !utf8.Valid(body) {
		return Charge{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var w wireEvent
	ok := readObject(dec, func(key string) bool {
		switch key {
		case "schemaVersion":
			raw, ok := rawValue(dec)
			if !ok {
				return false
			}
			if string(raw) == "null" {
				return true
			}
			var n int
			if !isNumber(raw) || json.Unmarshal(raw, &n) != nil {
				return false
			}
			w.SchemaVersion = &n
			return true
		case "chargeId":
			return readString(dec, &w.ChargeID)
		case "accountId":
			return readString(dec, &w.AccountID)
		case "chargeType":
			return readString(dec, &w.ChargeType)
		case "dueDate":
			return readString(dec, &w.DueDate)
		case "amount":
			tok, err := dec.Token()
			if err != nil {
				return false
			}
			if tok == nil {
				return true // null
			}
			if tok != json.Delim('{') {
				return false
			}
			m := &wireMoney{}
			w.Amount = m
			return readFields(dec, func(key string) bool {
				switch key {
				case "minor":
					raw, ok := rawValue(dec)
					if !ok {
						return false
					}
					m.Minor = raw
					return true
				case "currency":
					return readString(dec, &m.Currency)
				}
				return false
			})
		}
		return false // any other spelling is an unknown field
	})
	if !ok {
		return Charge{}, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Charge{}, false // trailing data
	}
	c, err := w.charge()
	return c, err == nil
}

// readObject reads '{' then the fields.
func readObject(dec *json.Decoder, field func(key string) bool) bool {
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return false
	}
	return readFields(dec, field)
}

// readFields reads "key": value pairs up to '}', refusing a repeated key.
func readFields(dec *json.Decoder, field func(key string) bool) bool {
	seen := map[string]bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if tok == json.Delim('}') {
			return true
		}
		key, isKey := tok.(string)
		if !isKey || seen[key] {
			return false
		}
		seen[key] = true
		if !field(key) {
			return false
		}
	}
}

// rawValue reads the next value whole.
func rawValue(dec *json.Decoder) (json.RawMessage, bool) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, false
	}
	return raw, true
}

func isNumber(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}

// readString reads a JSON string (or null, leaving *dst alone).
func readString(dec *json.Decoder, dst *string) bool {
	raw, ok := rawValue(dec)
	if !ok {
		return false
	}
	if string(raw) == "null" {
		return true
	}
	if raw[0] != '"' {
		return false
	}
	return json.Unmarshal(raw, dst) == nil
}

// FuzzParseEventDifferential: ParseEvent and the case-sensitive reference
// reader agree on every input: both refuse it, or both accept it with the
// same charge.
func FuzzParseEventDifferential(f *testing.F) {
	for _, s := range []string{
		`{"schemaVersion":1,"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`,
		`{"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30","AMOUNT":{"minor":999999,"currency":"INR"},"ACCOUNTID":"009999999999"}`,
		`{"chargeId":"CHG-1","accountId":"001234567890","amount":{"Minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`,
		`{"charge\u0049d":"CHG-1","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`,
		`{"schemaVersion":null,"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":1,"currency":"USD"},"chargeType":"LOCKER_RENT","dueDate":"2026-01-31"}`,
		// For the hand-written key walk: repeats in nested and array objects,
		// escaped and invalid UTF-8 keys, a second value in the stream,
		// numbers and literals at the edges of the grammar.
		`{"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":2500,"currency":"INR","minor":1},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`,
		`{"chargeId":{"a":[{"x":1,"x":2}]},"accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`,
		"{\"chargeId\":{\"\xff\":1,\"\xfe\":2},\"accountId\":\"001234567890\"}",
		`{"chargeId":"CHG-1","amount":{"minor":2500,"curr\u0065ncy":"INR"},"accountId":"001234567890","chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`,
		`{"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"} {"chargeId":"CHG-2"}`,
		`{"chargeId":"CHG-1","accountId":"001234567890","amount":{"minor":-0.5e+3,"currency":"INR"},"x":01,"chargeId":true}`,
		`[{"amount":{"MINOR":1}},null,false,"s\"]",-1E9]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := ParseEvent(body)
		want, ok := referenceParse(body)
		switch {
		case err == nil && !ok:
			t.Fatalf("ParseEvent accepted what a case-sensitive reader refuses: %q → %+v", body, got)
		case err != nil && ok:
			t.Fatalf("ParseEvent refused what a case-sensitive reader accepts: %q (%v) → %+v", body, err, want)
		case err == nil && got != want:
			t.Fatalf("readers disagree on %q: ParseEvent %+v, reference %+v", body, got, want)
		}
	})
}
