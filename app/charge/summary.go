package charge

import (
	"fmt"
	"strconv"
	"strings"
)

// Summary is what a charge's record keeps in clear beside its keyed
// fingerprint (driver.Record.Summary): the amount and currency
// reconciliation compares every posting with, and the account's last four
// characters for display. It is not secret: an operator's page shows the
// same, and the fingerprint still covers the whole account.
type Summary struct {
	Amount Money
	// Last4 is the account's last four characters ("" for an account of
	// four or fewer: shown as "****" whole).
	Last4 string
}

// SummaryOf is c's summary.
func SummaryOf(c Charge) Summary {
	return Summary{Amount: c.Amount, Last4: last4(c.AccountID)}
}

// last4 is acct's last four characters, "" when it has four or fewer
// (MaskAccount shows such an account as "****": its whole id is not
// shown).
func last4(acct string) string {
	r := []rune(acct)
	if len(r) <= 4 || strings.ContainsAny(string(r[len(r)-4:]), " \t\r\n") {
		return ""
	}
	return string(r[len(r)-4:])
}

// String is the summary as a record keeps it: "2500 INR 7890" (minor
// units, the ISO-4217 code, the last four; no last four: two fields).
func (s Summary) String() string {
	if s.Last4 == "" {
		return fmt.Sprintf("%d %s", s.Amount.Minor, s.Amount.Currency)
	}
	return fmt.Sprintf("%d %s %s", s.Amount.Minor, s.Amount.Currency, s.Last4)
}

// ParseSummary reads what String wrote; ok is false for "" (a record
// written before summaries) and for anything else it did not write.
func ParseSummary(s string) (Summary, bool) {
	f := strings.Split(s, " ")
	if len(f) < 2 || len(f) > 3 {
		return Summary{}, false
	}
	minor, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || minor < 0 || f[0] != strconv.FormatInt(minor, 10) {
		return Summary{}, false
	}
	cur := Currency(f[1])
	if !cur.Valid() {
		return Summary{}, false
	}
	out := Summary{Amount: Money{Minor: minor, Currency: cur}}
	if len(f) == 3 {
		if n := len([]rune(f[2])); n != 4 {
			return Summary{}, false
		}
		out.Last4 = f[2]
	}
	return out, true
}

// Account is the masked account the summary names ("****7890"), "" when it
// keeps no last four.
func (s Summary) Account() string {
	if s.Last4 == "" {
		return ""
	}
	return "****" + s.Last4
}

// SameAccount reports whether acct (a statement's account, in clear) ends
// in the summary's last four; true when the summary keeps none or acct is
// not given (nothing to compare).
func (s Summary) SameAccount(acct string) bool {
	return s.Last4 == "" || acct == "" || strings.EqualFold(last4(acct), s.Last4)
}
