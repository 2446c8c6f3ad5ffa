// Package apptest holds test helpers the application's packages share: an
// Ed25519 key for signing tests, the account numbers the masking fuzz
// tests write, and a log sink several goroutines write.
package apptest

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// Key is a new Ed25519 private key.
func Key(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// AccountNumber makes an account number of a fuzzer's digits (a byte that
// is not a digit taken as one, 8-18 of them; "" for fewer than 8) and
// writes it plain (sep%5 == 0) or in groups of group%n digits (at least
// one) joined by '-', ' ', '.' or '/'.
func AccountNumber(digits string, sep, group int) (acct, grouped string) {
	if len(digits) < 8 {
		return "", ""
	}
	var b strings.Builder
	for i := 0; i < len(digits) && i < 18; i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			c = '0' + c%10
		}
		b.WriteByte(c)
	}
	acct = b.String()
	s := Abs(sep) % 5
	if s == 0 {
		return acct, acct
	}
	g := max(Abs(group)%len(acct), 1)
	var w strings.Builder
	for i := range len(acct) {
		if i > 0 && i%g == 0 {
			w.WriteByte("- ./"[s-1])
		}
		w.WriteByte(acct[i])
	}
	return acct, w.String()
}

// Abs is |n|, 0 for math.MinInt (whose negation overflows): a fuzzer's
// int made a non-negative index.
func Abs(n int) int {
	if n < 0 {
		if n = -n; n < 0 { // math.MinInt
			return 0
		}
	}
	return n
}
