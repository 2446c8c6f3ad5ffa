package charge_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
)

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
