// Package wiretest is a test helper: ChargeDueEvents with one field
// shifted, the value of another put in its place (an account number where
// the currency, the amount, the date or the charge id should be), for the
// tests that hold the parser's errors, the DLQ reasons and the log lines to
// naming the field, never the value. It imports nothing of ours.
package wiretest

import (
	"strings"
)

// Valid is a ChargeDueEvent the parser accepts.
const Valid = `{"schemaVersion":1,"chargeId":"CHG-SHIFT-1","accountId":"001234567890",` +
	`"amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`

// Case is one malformed event: Body, and Field, the field the parser's
// error must name ("" for the body as a whole).
type Case struct {
	Name, Body, Field string
}

// Shifted are events with value (digits, an account number: it is also
// written as a JSON number) in every field in turn, as a string and as a
// number, and as a field name and a whole body. Each is refused.
func Shifted(value string) []Case {
	replace := func(old, new string) string {
		if !strings.Contains(Valid, old) {
			panic("wiretest: " + old + " is not in Valid")
		}
		return strings.Replace(Valid, old, new, 1)
	}
	q := `"` + value + `"`
	return []Case{
		{"schemaVersion as a number", replace(`"schemaVersion":1`, `"schemaVersion":`+value), "schemaVersion"},
		{"schemaVersion as a string", replace(`"schemaVersion":1`, `"schemaVersion":`+q), "schemaVersion"},
		{"chargeId as a number", replace(`"CHG-SHIFT-1"`, value), "chargeId"},
		{"chargeId with a space", replace(`"CHG-SHIFT-1"`, `"`+value+` INR"`), "chargeId"},
		{"chargeId with a comma", replace(`"CHG-SHIFT-1"`, `"`+value+`,2500"`), "chargeId"},
		{"accountId as a number", replace(`"001234567890"`, value), "accountId"},
		{"accountId grouped", replace(`"001234567890"`, `"`+value[:4]+"-"+value[4:]+`"`), "accountId"},
		{"accountId too long", replace(`"001234567890"`, `"`+strings.Repeat(value, 3)+`"`), "accountId"},
		{"amount as a string", replace(`{"minor":2500,"currency":"INR"}`, q), "amount"},
		{"amount as a number", replace(`{"minor":2500,"currency":"INR"}`, value), "amount"},
		{"amount.minor as a string", replace(`"minor":2500`, `"minor":`+q), "amount.minor"},
		{"amount.minor with a fraction", replace(`"minor":2500`, `"minor":`+value+`.5`), "amount.minor"},
		{"amount.minor negative", replace(`"minor":2500`, `"minor":-`+value), "amount.minor"},
		{"amount.minor overflowing", replace(`"minor":2500`, `"minor":`+value+value), "amount.minor"},
		{"amount.minor with an exponent", replace(`"minor":2500`, `"minor":`+value+`e3`), "amount.minor"},
		{"amount.currency", replace(`"INR"`, q), "amount.currency"},
		{"amount.currency as a number", replace(`"INR"`, value), "amount.currency"},
		{"chargeType", replace(`"SMS_ALERT_FEE"`, q), "chargeType"},
		{"chargeType as a number", replace(`"SMS_ALERT_FEE"`, value), "chargeType"},
		{"dueDate", replace(`"2026-11-30"`, q), "dueDate"},
		{"dueDate after a date", replace(`"2026-11-30"`, `"2026-11-30 `+value+`"`), "dueDate"},
		{"dueDate as a number", replace(`"2026-11-30"`, value), "dueDate"},
		{"a field named by the value", replace(`"dueDate"`, q+`:1,"dueDate"`), mask(value)},
		{"a nested field named by the value", replace(`"currency":"INR"`, `"currency":"INR",`+q+`:1`), "amount." + mask(value)},
		{"the body a number", value, ""},
		{"the body a string", q, ""},
		{"the body an array", "[" + value + "]", ""},
		{"a syntax error after the value", replace(`"minor":2500`, `"minor":`+value+`x`), ""},
		{"truncated after the value", Valid[:strings.Index(Valid, `"dueDate"`)] + `"dueDate":` + value, ""},
	}
}

// mask is how the parser names a field that is the value: every character
// but the last four masked (charge.MaskText of a digit run; this package
// imports nothing of ours).
func mask(value string) string {
	if len(value) <= 4 {
		return "****"
	}
	return strings.Repeat("*", len(value)-4) + value[len(value)-4:]
}

// Fragments are the pieces of value a text must not hold: every run of 8
// of its characters (the masking keeps 4, and any 8 in a row is more of
// the number than any masked form shows).
func Fragments(value string) []string {
	if len(value) <= 8 {
		return []string{value}
	}
	var out []string
	for i := 0; i+8 <= len(value); i++ {
		out = append(out, value[i:i+8])
	}
	return out
}

// Leaks is the first fragment of value in text, "" when there is none.
func Leaks(text, value string) string {
	for _, f := range Fragments(value) {
		if strings.Contains(text, f) {
			return f
		}
	}
	return ""
}
