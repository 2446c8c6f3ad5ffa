package statement

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// ParseAmount turns decimal text ("25", "25.5", "25.00", "1234567.891" for
// BHD) into integer minor units of cur, with integer arithmetic only.
//
// The text is an unsigned xs:decimal: digits with at most one '.', at least
// one digit on either side of it ("25." and ".5" are xs:decimal too). It is
// refused when it is empty, signed ('-' or '+'), holds a space or an
// exponent, has more fraction digits than cur has minor digits (also
// trailing zeros: "25.000" is refused for INR), when cur is unknown, or
// when the amount does not fit an int64 of minor units. Zero is accepted
// here; a posting of zero is refused by the reader.
func ParseAmount(text string, cur charge.Currency) (charge.Money, error) {
	digits := cur.MinorUnits()
	if digits < 0 {
		return charge.Money{}, fmt.Errorf("%q is not a known ISO-4217 currency", string(cur))
	}
	if text == "" {
		return charge.Money{}, errors.New("empty amount")
	}
	var (
		v       int64
		seenDot bool
		frac    int
		nDigits int
	)
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c >= '0' && c <= '9':
			if v > (math.MaxInt64-int64(c-'0'))/10 {
				return charge.Money{}, fmt.Errorf("%q is too large", text)
			}
			v = v*10 + int64(c-'0')
			nDigits++
			if seenDot {
				frac++
			}
		case c == '.' && !seenDot:
			seenDot = true
		case c == '-':
			return charge.Money{}, fmt.Errorf("%q is negative", text)
		case c == '+':
			return charge.Money{}, fmt.Errorf("%q has a sign", text)
		case c == 'e' || c == 'E':
			return charge.Money{}, fmt.Errorf("%q has an exponent", text)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return charge.Money{}, fmt.Errorf("%q holds a space", text)
		default:
			return charge.Money{}, fmt.Errorf("%q is not a decimal amount", text)
		}
	}
	if nDigits == 0 {
		return charge.Money{}, fmt.Errorf("%q is not a decimal amount", text)
	}
	if frac > digits {
		return charge.Money{}, fmt.Errorf("%q has %d decimals, %s has %d", text, frac, cur, digits)
	}
	for range digits - frac {
		if v > math.MaxInt64/10 {
			return charge.Money{}, fmt.Errorf("%q is too large", text)
		}
		v *= 10
	}
	return charge.Money{Minor: v, Currency: cur}, nil
}

// FormatAmount writes m's minor units as decimal text with exactly the
// currency's minor digits: INR 2500 → "25.00", JPY 500 → "500", BHD 1500
// → "1.500". A negative amount gets a leading '-'; a currency this package
// does not know is written as the integer of minor units.
func FormatAmount(m charge.Money) string {
	d := m.Currency.MinorUnits()
	s := strconv.FormatInt(m.Minor, 10)
	if d <= 0 {
		return s
	}
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	for len(s) <= d {
		s = "0" + s
	}
	return sign + s[:len(s)-d] + "." + s[len(s)-d:]
}
