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

// Issue 34 item 4: an account number is masked however its groups are
// joined and whatever stands next to it; dates and amounts are not.
func TestMaskTextMasksAccountsByValue(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		accounts       []string
	}{
		{name: "dots", in: "account 0012.3456.7890 closed", want: "account ****.****.7890 closed"},
		{name: "slashes", in: "account 0012/3456/7890 closed", want: "account ****/****/7890 closed"},
		{name: "dashes", in: "account 0012-3456-7890 closed", want: "account ****-****-7890 closed"},
		{name: "spaces", in: "IBAN GB82 WEST 1234 5698 7654 32", want: "IBAN GB82 WEST **** **** **54 32"},
		{name: "plain", in: "a/c 998877665544332211.", want: "a/c **************2211."},
		{name: "pairs", in: "acct 12.34.56.78", want: "acct **.**.56.78"},
		{name: "dates stay", in: "due 2026-11-30, 30/11/2026, 2026.11.30, 30.11.2026, 2026/11/30, 30-11-2026",
			want: "due 2026-11-30, 30/11/2026, 2026.11.30, 30.11.2026, 2026/11/30, 30-11-2026"},
		{name: "amounts stay", in: "fee 1500.00 on 30.11.2026, INR 25.00 ref 1234567", want: "fee 1500.00 on 30.11.2026, INR 25.00 ref 1234567"},
		{name: "an amount after a date", in: "on 2026-11-30 1500.00", want: "on 2026-11-30 1500.00"},
		{name: "a time", in: "at 10:47:00 on 2026-11-30", want: "at 10:47:00 on 2026-11-30"},
		// A group written with another separator in front of an account
		// took the account's first group: the rest (6 digits) was shown.
		{name: "another separator in front", in: "99.001234-567890", want: "**.******-**7890"},
		{name: "a date's separator in front", in: "2026-12.34.56.78", want: "2026-**.**.56.78"},
		{name: "mixed separators", in: "0012-3456 7890", want: "****-**** 7890"},
		// The day could be the account's first digits: it is masked rather
		// than risk showing 8 of them.
		{name: "an account after a date", in: "2026-11-30 12345678", want: "2026-11-** ****5678"},
		{name: "a given account everywhere", in: "acct AB12CD34 frozen, again AB12CD34", want: "acct ****CD34 frozen, again ****CD34", accounts: []string{"AB12CD34"}},
		{name: "a given account in a word", in: "X-AB12CD34EF", want: "X-****CD34EF", accounts: []string{"AB12CD34"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := charge.MaskText(tc.in, tc.accounts...); got != tc.want {
				t.Errorf("MaskText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// digitsOf is s's ASCII digits, separators and all else skipped.
func digitsOf(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The message's own account, written in groups, is the account: an id or
// a reference holding it grouped must not show it (issue 54 item 2 attack).
func TestAttack54MaskGroupedOwnAccount(t *testing.T) {
	for _, tt := range []struct{ id, account string }{
		{"CHG-123-4567", "1234567"},             // an account shorter than 8, grouped
		{"CHG-2026-11-30-1234", "202611301234"}, // an account read as a date and four
		{"REF-0012-3456-7890", "001234567890"},  // the posting's account, grouped
		{"CHG_0012_3456_7890", "001234567890"},  // '_' joins groups in an id
		{"CHG:0012:3456:7890", "001234567890"},  // ':' too
	} {
		for name, show := range map[string]func(string, ...string) string{"ShowID": charge.ShowID, "ShowRef": charge.ShowRef} {
			got := show(tt.id, tt.account)
			if strings.Contains(digitsOf(got), tt.account) {
				t.Errorf("%s(%q, %q) = %q: the account is shown", name, tt.id, tt.account, got)
			}
			if !strings.HasSuffix(digitsOf(got), tt.account[len(tt.account)-4:]) {
				t.Errorf("%s(%q, %q) = %q: its last four are not kept", name, tt.id, tt.account, got)
			}
		}
		if got := charge.MaskText("see "+tt.id+" now", tt.account); strings.Contains(digitsOf(got), tt.account) {
			t.Errorf("MaskText(%q, %q) = %q: the account is shown", tt.id, tt.account, got)
		}
	}
}

// A charge's log line shows its id as every view does (charge.ShowID with
// its own account): an id holding the account does not put it in a log.
func TestAttack54MaskLogValueChargeID(t *testing.T) {
	for _, tt := range []struct{ id, account, want string }{
		{"CHG-001234567890", "001234567890", "CHG-********7890"},
		{"CHG-123-4567", "1234567", "CHG-***-4567"},
		{"CHG-2026-11-000123", "001234567890", "CHG-2026-11-000123"},
	} {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "charge", charge.Charge{ID: tt.id, AccountID: tt.account})
		if !strings.Contains(buf.String(), "charge.charge_id="+tt.want+" ") {
			t.Errorf("id %q logged as: %s want %s", tt.id, buf.String(), tt.want)
		}
	}
}

// Digits joined by '_' or ':' are one number in an id, as '-' joins them:
// another customer's account so written is masked as "CHG-0012-3456-7890".
func TestAttack54MaskUnderscoreColonGroups(t *testing.T) {
	for _, id := range []string{"CHG_0012_3456_7890", "CHG:0012:3456:7890", "X_001234_567890"} {
		got := charge.ShowID(id)
		if strings.Contains(digitsOf(got), "12345678") || strings.Contains(digitsOf(got), "00123456") {
			t.Errorf("ShowID(%q) = %q: 8+ digits of a number shown", id, got)
		}
	}
	// Ids as issued stay whole.
	for _, id := range []string{"CHG-2026-11-000123", "CHG_2026_11_30_0001", "CHG:42", "CHG-2026-11-30-0001"} {
		if got := charge.ShowID(id); got != id {
			t.Errorf("ShowID(%q) = %q, want it whole", id, got)
		}
	}
}

// Text from outside (a body's note, a bank's message) with another
// customer's account joined by '_' or ':' keeps its last four digits, as
// with '-'; times stay.
func TestAttack54MaskTextUnderscoreColonGroups(t *testing.T) {
	for in, want := range map[string]string{
		"paid from 9988_7766_5544":   "paid from ****_****_5544",
		"paid from 9988:7766:5544":   "paid from ****:****:5544",
		"at 2026-11-30 12:30:45 UTC": "at 2026-11-30 12:30:45 UTC",
		"at 2026-11-30T12:30:45Z":    "at 2026-11-30T12:30:45Z",
	} {
		if got := charge.MaskText(in); got != want {
			t.Errorf("MaskText(%q) = %q, want %q", in, got, want)
		}
	}
}

// Digits of another script (full-width) read as the account by a person:
// an id outside the id's form is masked as its ASCII digits would be.
func TestAttack54MaskFullWidthDigits(t *testing.T) {
	id := "CHG-００１２３４５６７８９０"
	for name, show := range map[string]func(string, ...string) string{"ShowID": charge.ShowID, "ShowRef": charge.ShowRef} {
		got := show(id)
		if strings.Contains(got, "３４５６７８") {
			t.Errorf("%s(%q) = %q: full-width digits shown", name, id, got)
		}
	}
}

// The same in any text from outside (a body, a bank's message).
func TestAttack54MaskFullWidthText(t *testing.T) {
	got := charge.MaskText("account ００１２３４５６７８９０ and ٠٠١٢٣٤٥٦٧٨٩٠", "001234567890")
	if want := "account ********7890 and ********7890"; got != want {
		t.Errorf("MaskText = %q, want %q", got, want)
	}
}

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
