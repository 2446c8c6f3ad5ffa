package charge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

func TestMoneyString(t *testing.T) {
	tests := []struct {
		m    charge.Money
		want string
	}{
		{charge.Money{Minor: 2500, Currency: "INR"}, "INR 25.00"},
		{charge.Money{Minor: 5, Currency: "USD"}, "USD 0.05"},
		{charge.Money{Minor: 1234, Currency: "KWD"}, "KWD 1.234"},
		{charge.Money{Minor: 500, Currency: "JPY"}, "JPY 500"},
		{charge.Money{Minor: -150, Currency: "EUR"}, "EUR -1.50"},
		{charge.Money{Minor: math.MinInt64, Currency: "USD"}, "USD -92233720368547758.08"},
		{charge.Money{Minor: math.MaxInt64, Currency: "USD"}, "USD 92233720368547758.07"},
	}
	for _, tt := range tests {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.m, got, tt.want)
		}
	}
}

func TestMaskAccount(t *testing.T) {
	for in, want := range map[string]string{
		"001234567890": "********7890",
		"12345":        "*2345",
		"1234":         "****",
		"":             "****",
	} {
		if got := charge.MaskAccount(in); got != want {
			t.Errorf("MaskAccount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestChargeLogValueNeverHoldsTheAccount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("x", "charge", smsFee("CHG-LOG"))
	if strings.Contains(buf.String(), "001234567890") || !strings.Contains(buf.String(), "********7890") {
		t.Fatalf("log line = %s", buf.String())
	}
}

func TestFingerprintCoversThePayload(t *testing.T) {
	base := smsFee("CHG-FP")
	variants := map[string]func(*charge.Charge){
		"account":  func(c *charge.Charge) { c.AccountID = "009999999999" },
		"amount":   func(c *charge.Charge) { c.Amount.Minor++ },
		"currency": func(c *charge.Charge) { c.Amount.Currency = "USD" },
		"type":     func(c *charge.Charge) { c.Type = charge.LockerRent },
		"due date": func(c *charge.Charge) { c.DueDate = c.DueDate.AddDate(0, 0, 1) },
	}
	for name, change := range variants {
		c := base
		change(&c)
		if c.Fingerprint(nil) == base.Fingerprint(nil) {
			t.Errorf("changing the %s kept the fingerprint", name)
		}
	}
	if smsFee("CHG-FP").Fingerprint(nil) != base.Fingerprint(nil) {
		t.Error("fingerprint is not stable")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want charge.Class
	}{
		{"decline", &charge.DeclineError{Code: "ACCOUNT_CLOSED"}, charge.ClassPermanent},
		{"wrapped decline", fmt.Errorf("debit: %w", &charge.DeclineError{Code: "X"}), charge.ClassPermanent},
		{"permanent wrapper", charge.Permanent(errors.New("422")), charge.ClassPermanent},
		{"invalid event", &charge.InvalidEventError{Field: "chargeId", Reason: "empty"}, charge.ClassInvalid},
		{"lease lost", fmt.Errorf("complete: %w", idempotency.ErrLeaseLost), charge.ClassLeaseLost},
		{"store down", driver.Unavailable("claim", errors.New("dial tcp: refused")), charge.ClassRetryable},
		{"timeout", context.DeadlineExceeded, charge.ClassRetryable},
		{"cancelled", fmt.Errorf("debit: %w", context.Canceled), charge.ClassRetryable},
		{"unknown", errors.New("boom"), charge.ClassRetryable},
	}
	for _, tt := range tests {
		if got := charge.Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMaskText(t *testing.T) {
	for in, want := range map[string]string{
		"account 009999999999 is closed":           "account ********9999 is closed",
		"acct AB12CD34 frozen":                     "acct ****CD34 frozen",
		"due 2026-11-30, amount 2500, ref 1234567": "due 2026-11-30, amount 2500, ref 1234567",
		"12345678":                         "****5678",
		"":                                 "",
		"account 0012-3456-7890 is frozen": "account ****-****-7890 is frozen",
		"account 0012 3456 7890 is frozen": "account **** **** 7890 is frozen",
		"ACCOUNT_001234567891_FROZEN":      "ACCOUNT_********7891_FROZEN",
		"on 30-11-2026 at 10:47, 2026-11-30 closed": "on 30-11-2026 at 10:47, 2026-11-30 closed",
		"ref 123-456 and 1234-5678":                 "ref 123-456 and ****-5678",
		// Read both as 0012-3456 and as 3456 7890: neither shows 8 digits.
		"0012-3456 7890": "****-**** 7890",
	} {
		if got := charge.MaskText(in, "AB12CD34"); got != want {
			t.Errorf("MaskText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShowIDShowsAnIDWholeAndMasksOnlyAnAccountInIt(t *testing.T) {
	const own = "001234567890" // the message's account
	for _, tt := range []struct{ in, want string }{
		{"CHG-2026-11-000123", "CHG-2026-11-000123"}, // a date and a sequence: an id
		{"CHG-2026-11-30-0001", "CHG-2026-11-30-0001"},
		{"2026.11.30.000123", "2026.11.30.000123"},
		{"CHG-0012-3456-7890", "CHG-****-****-7890"}, // an account's grouping
		{"CHG-001-234-567-89", "CHG-***-***-*67-89"},
		{"CHG-adc04251-033", "CHG-adc04251-033"}, // two parts of an id
		{"CHG-0012-3456", "CHG-****-3456"},       // two groups of an account's length
		{"CHG-2026-11-0012-3456-7890", "CHG-****-**-****-****-7890"},
		{"CHG-202611301234", "CHG-********1234"}, // no separator: no date
		{"CHG-2026-13-00012345", "CHG-****-**-****2345"},
		{"CHG-1", "CHG-1"},
		{"UTR20261130000123456", "UTR*************3456"}, // 8+ digits in a row: masked, whatever they name
		{"CHG-" + own, "CHG-********7890"},               // the message's own account in it
		{own, "********7890"},
		{"445566778899 INR", "********8899 INR"}, // not an id: read as text
		{"445566778899,2500", "********8899,2500"},
		{"0012-3456-7890 x", "****-****-7890 x"},
		{"CHG-\x1b[2J1", "CHG-[2J1"}, // printable first: the escape dropped
		{"", ""},
	} {
		if got := charge.ShowID(tt.in, own); got != tt.want {
			t.Errorf("ShowID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := charge.ShowID(strings.Repeat("9", 400)); len(got) > 128+len("…") {
		t.Errorf("ShowID kept %d bytes of a 400-digit id", len(got))
	}
}

func TestShowRefShowsABanksReferenceWholeUnlessItHoldsTheAccount(t *testing.T) {
	const own = "001234567890"
	for _, tt := range []struct{ in, want string }{
		{"CBS0000000003", "CBS0000000003"}, // digits are a reference's
		{"UTR20261130000123456", "UTR20261130000123456"},
		{"REF-CHG-2026-11-000123", "REF-CHG-2026-11-000123"},
		{"REF-" + own, "REF-********7890"},           // the posting's account in it
		{"ref 0012-3456-7890", "ref ****-****-7890"}, // not a reference's form: text
		{"", ""},
	} {
		if got := charge.ShowRef(tt.in, own); got != tt.want {
			t.Errorf("ShowRef(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUntrustedTextIsPrintableMaskedAndBounded(t *testing.T) {
	long := "\x1b[2J\x1b]0;pwned\x07account 0012-3456-7890\r\nfrozen " + strings.Repeat("é", 100_000)
	got := charge.Untrusted(long)
	if len(got) > charge.MaxOutsideText+len("…") {
		t.Errorf("Untrusted kept %d bytes, want at most %d", len(got), charge.MaxOutsideText)
	}
	if strings.ContainsAny(got, "\x1b\x07\r\n") {
		t.Errorf("Untrusted kept control characters: %q", got[:60])
	}
	if !strings.HasPrefix(got, "[2J]0;pwnedaccount ****-****-7890  frozen") || !utf8.ValidString(got) {
		t.Errorf("Untrusted = %q…", got[:60])
	}
	if charge.Untrusted("\xff\xfeok\u0085") != "ok" {
		t.Errorf("invalid UTF-8 and C1 controls kept: %q", charge.Untrusted("\xff\xfeok\u0085"))
	}
}

// Accounts written with '.' or '/' between their groups are masked too;
// dates with those separators are not.
func TestMaskTextWithDotsAndSlashes(t *testing.T) {
	for in, want := range map[string]string{
		"account 0012.3456.7890 closed": "account ****.****.7890 closed",
		"account 0012/3456/7890 closed": "account ****/****/7890 closed",
		"due 30/11/2026, 2026.11.30":    "due 30/11/2026, 2026.11.30",
		"fee 1500.00":                   "fee 1500.00",
	} {
		if got := charge.MaskText(in); got != want {
			t.Errorf("MaskText(%q) = %q, want %q", in, got, want)
		}
	}
}
