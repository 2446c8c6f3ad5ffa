package charge_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/internal/apptest"
)

// FuzzMaskText: an account number of 8-18 digits, plain or in groups
// joined by one of the separators, anywhere in any text, never shows more
// than four of its digits in a row (separators skipped); MaskText only
// ever turns digits into '*'.
func FuzzMaskText(f *testing.F) {
	f.Add("account ", "001234567890", 1, 4, " is closed", false)
	f.Add("", "12345678", 0, 0, "", false)
	f.Add("99.", "001234567890", 1, 6, "", false)
	f.Add("2026-", "12345678", 3, 2, "", false)
	f.Add("0012-", "34567890", 2, 4, "", false)
	f.Add("30/11/", "20265678", 2, 4, "/2026", false)
	f.Add("due 2026-11-30 ", "998877665544332211", 4, 3, ".00", true)
	f.Add("x", "123456789012345678", 3, 5, "-1", false)
	// Found by the fuzzer: the given account, masked first, cut the number
	// around it into pieces too short to mask ("****0000-00").
	f.Add("0", "00000000", 1, 7, "0", true)
	f.Fuzz(func(t *testing.T, prefix, digits string, sep, group int, suffix string, given bool) {
		acct, grouped := apptest.AccountNumber(digits, sep, group)
		if acct == "" {
			t.Skip()
		}
		in := prefix + grouped + suffix
		var accounts []string
		if given {
			accounts = []string{acct}
		}
		got := charge.MaskText(in, accounts...)
		if len(got) != len(in) {
			t.Fatalf("MaskText(%q) = %q: %d bytes, not %d", in, got, len(got), len(in))
		}
		for i := range in {
			if got[i] != in[i] && (got[i] != '*' || !isDigit(in[i])) {
				t.Fatalf("MaskText(%q) = %q: byte %d %q became %q", in, got, i, in[i], got[i])
			}
		}
		run := 0
		for i := len(prefix); i < len(prefix)+len(grouped); i++ {
			if !isDigit(in[i]) {
				continue // a separator
			}
			if got[i] == '*' {
				run = 0
				continue
			}
			if run++; run > 4 {
				t.Fatalf("MaskText(%q) = %q: shows %d digits of %s in a row", in, got, run, acct)
			}
		}
		if !strings.ContainsFunc(prefix+suffix, func(r rune) bool { return r >= '0' && r <= '9' }) {
			// No other digits: none of the output's digits may spell five
			// of the account's in a row, wherever they are.
			if s := digitsAndStars(got); containsRun(s, acct, 5) {
				t.Fatalf("MaskText(%q) = %q shows five digits of %s in a row", in, got, acct)
			}
		}
	})
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// digitsAndStars keeps only the digits and the '*' of s.
func digitsAndStars(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r == '*' {
			return r
		}
		return -1
	}, s)
}

// containsRun: s holds n of acct's digits in a row, in acct's order.
func containsRun(s, acct string, n int) bool {
	for i := 0; i+n <= len(acct); i++ {
		if strings.Contains(s, acct[i:i+n]) {
			return true
		}
	}
	return false
}
