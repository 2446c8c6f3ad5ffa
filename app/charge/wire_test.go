package charge_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
)

const validEvent = `{"schemaVersion":1,"chargeId":"CHG-2026-11-000123","accountId":"001234567890",` +
	`"amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`

func TestParseEventValid(t *testing.T) {
	c, err := charge.ParseEvent([]byte(validEvent))
	if err != nil {
		t.Fatal(err)
	}
	want := charge.Charge{
		ID: "CHG-2026-11-000123", AccountID: "001234567890",
		Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
	}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	// schemaVersion is optional.
	if _, err := charge.ParseEvent([]byte(strings.Replace(validEvent, `"schemaVersion":1,`, "", 1))); err != nil {
		t.Fatalf("without schemaVersion: %v", err)
	}
}

func TestMarshalEventRoundTrips(t *testing.T) {
	c, err := charge.ParseEvent([]byte(validEvent))
	if err != nil {
		t.Fatal(err)
	}
	b, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != validEvent {
		t.Fatalf("marshal = %s\nwant      %s", b, validEvent)
	}
}

func TestParseEventRejects(t *testing.T) {
	replace := func(old, new string) string { return strings.Replace(validEvent, old, new, 1) }
	tests := []struct {
		name, body, field string
	}{
		{"empty body", ``, ""},
		{"not json", `hello`, ""},
		{"array", `[1,2]`, ""},
		{"missing chargeId", replace(`"chargeId":"CHG-2026-11-000123",`, ``), "chargeId"},
		{"empty chargeId", replace(`"CHG-2026-11-000123"`, `""`), "chargeId"},
		{"null chargeId", replace(`"CHG-2026-11-000123"`, `null`), "chargeId"},
		{"chargeId with space", replace(`"CHG-2026-11-000123"`, `"CHG 1"`), "chargeId"},
		{"chargeId too long", replace(`"CHG-2026-11-000123"`, `"`+strings.Repeat("a", 129)+`"`), "chargeId"},
		{"missing account", replace(`"accountId":"001234567890",`, ``), "accountId"},
		{"bad account", replace(`"001234567890"`, `"0012-3456"`), "accountId"},
		{"missing amount", replace(`"amount":{"minor":2500,"currency":"INR"},`, ``), "amount"},
		{"zero amount", replace(`"minor":2500`, `"minor":0`), "amount.minor"},
		{"negative amount", replace(`"minor":2500`, `"minor":-2500`), "amount.minor"},
		{"fractional amount", replace(`"minor":2500`, `"minor":25.00`), "amount.minor"},
		{"exponent amount", replace(`"minor":2500`, `"minor":2.5e3`), "amount.minor"},
		{"string amount", replace(`"minor":2500`, `"minor":"2500"`), "amount.minor"},
		{"overflowing amount", replace(`"minor":2500`, `"minor":9223372036854775808`), "amount.minor"},
		{"missing minor", replace(`"minor":2500,`, ``), "amount.minor"},
		{"unknown currency", replace(`"INR"`, `"XYZ"`), "amount.currency"},
		{"lowercase currency", replace(`"INR"`, `"inr"`), "amount.currency"},
		{"missing currency", replace(`,"currency":"INR"`, ``), "amount.currency"},
		{"bad type", replace(`"SMS_ALERT_FEE"`, `"LATE_FEE"`), "chargeType"},
		{"missing type", replace(`"chargeType":"SMS_ALERT_FEE",`, ``), "chargeType"},
		{"bad date", replace(`"2026-11-30"`, `"2026-02-30"`), "dueDate"},
		{"datetime not date", replace(`"2026-11-30"`, `"2026-11-30T00:00:00Z"`), "dueDate"},
		{"unknown field", replace(`"dueDate"`, `"ammount":1,"dueDate"`), "ammount"},
		// encoding/json matches names case-insensitively, last one wins: a
		// case-sensitive reader would see another amount and account.
		{"case variant of a field", validEvent[:len(validEvent)-1] + `,"AMOUNT":{"minor":999999,"currency":"INR"},"ACCOUNTID":"009999999999"}`, "AMOUNT"},
		{"case variant alone", replace(`"accountId"`, `"accountID"`), "accountID"},
		{"case variant nested", replace(`"minor":2500`, `"Minor":2500`), "amount.Minor"},
		{"case variant nested after the real one", replace(`"currency":"INR"`, `"currency":"INR","CURRENCY":"USD"`), "amount.CURRENCY"},
		{"unknown nested field", replace(`"currency":"INR"`, `"currency":"INR","scale":2`), "amount.scale"},
		{"duplicate field", replace(`"chargeType"`, `"amount":{"minor":1,"currency":"INR"},"chargeType"`), "amount"},
		{"duplicate nested field", replace(`"minor":2500`, `"minor":2500,"minor":1`), "amount.minor"},
		{"trailing data", validEvent + `{}`, ""},
		{"unsupported version", replace(`"schemaVersion":1`, `"schemaVersion":2`), "schemaVersion"},
		{"oversize body", validEvent + strings.Repeat(" ", charge.MaxEventBytes), ""},
		{"invalid utf8", replace(`"CHG-2026-11-000123"`, "\"CHG-\xff\""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := charge.ParseEvent([]byte(tt.body))
			if !errors.Is(err, charge.ErrInvalidEvent) {
				t.Fatalf("err = %v, want ErrInvalidEvent", err)
			}
			var ie *charge.InvalidEventError
			if !errors.As(err, &ie) || ie.Field != tt.field || ie.Reason == "" {
				t.Fatalf("err = %#v, want field %q with a reason", err, tt.field)
			}
			if charge.Classify(err) != charge.ClassInvalid {
				t.Fatalf("Classify = %v, want ClassInvalid", charge.Classify(err))
			}
		})
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(validEvent))
	f.Add([]byte(`{"amount":{"minor":1,"minor":2}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := charge.ParseEvent(body)
		if err != nil {
			if !errors.Is(err, charge.ErrInvalidEvent) {
				t.Fatalf("error not typed: %v", err)
			}
			return
		}
		if c.ID == "" || c.Amount.Minor <= 0 || !c.Amount.Currency.Valid() || !c.Type.Valid() {
			t.Fatalf("accepted an invalid charge %+v from %q", c, body)
		}
	})
}

// shiftedAccount is an account number a producer put in the wrong field.
const shiftedAccount = "445566778899"

// A producer that shifts its fields puts an account number where another
// field should be: the parser's error names the field (an unknown one
// masked), never the value, and the result dead-lettered with it (its
// reason, which goes to the DLQ and the log line) holds none of it either.
func TestParseEventNamesTheFieldNeverTheValue(t *testing.T) {
	if _, err := charge.ParseEvent([]byte(wiretest.Valid)); err != nil {
		t.Fatalf("the template does not parse: %v", err)
	}
	for _, tt := range wiretest.Shifted(shiftedAccount) {
		t.Run(tt.Name, func(t *testing.T) {
			_, err := charge.ParseEvent([]byte(tt.Body))
			var ie *charge.InvalidEventError
			if !errors.As(err, &ie) {
				t.Fatalf("ParseEvent(%s) = %v, want an InvalidEventError", tt.Body, err)
			}
			if ie.Field != tt.Field {
				t.Errorf("field %q, want %q (%v)", ie.Field, tt.Field, err)
			}
			if tt.Field != "" && !strings.Contains(err.Error(), tt.Field+": ") {
				t.Errorf("%q does not name the field %s", err, tt.Field)
			}
			if f := wiretest.Leaks(err.Error(), shiftedAccount); f != "" {
				t.Errorf("the error quotes the value (%s): %q", f, err)
			}
			res := charge.InvalidResult(err)
			if res.Outcome != charge.Invalid || res.Reason == "" {
				t.Fatalf("InvalidResult = %+v", res)
			}
			if f := wiretest.Leaks(res.Reason, shiftedAccount); f != "" {
				t.Errorf("the reason quotes the value (%s): %q", f, res.Reason)
			}
		})
	}
}

// Whatever an error quotes from a body, the reason made of it is masked by
// value: a long digit run keeps its last four digits.
func TestInvalidResultMasksWhatAnErrorQuotes(t *testing.T) {
	err := &charge.InvalidEventError{Field: "accountId", Reason: "\"0012-3456-7890\" or 001234567890\x1b[2J is not one"}
	res := charge.InvalidResult(err)
	if strings.Contains(res.Reason, "001234567890") || strings.Contains(res.Reason, "0012-3456") || strings.Contains(res.Reason, "\x1b") ||
		!strings.Contains(res.Reason, "********7890") || !strings.Contains(res.Reason, "accountId") {
		t.Fatalf("reason %q: want the account masked, control characters dropped, the field named", res.Reason)
	}
	if !errors.Is(res.Err, charge.ErrInvalidEvent) {
		t.Fatalf("Err = %v", res.Err)
	}
}
