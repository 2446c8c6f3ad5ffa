package charge_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
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
