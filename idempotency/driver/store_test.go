package driver

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrefixEndBoundsEveryKeyOfThePrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix, end string
		ok          bool
	}{
		{"", "", false}, {"CHG-", "CHG.", true}, {"a%", "a&", true}, {"é", "ê", true},
		{"a\U0010FFFF", "b", true}, {"\U0010FFFF", "", false}, {"\uD7FF", "\uE000", true},
	} {
		end, ok := PrefixEnd(tc.prefix)
		if end != tc.end || ok != tc.ok {
			t.Errorf("PrefixEnd(%q) = %q %v, want %q %v", tc.prefix, end, ok, tc.end, tc.ok)
		}
		if ok && !utf8.ValidString(end) {
			t.Errorf("PrefixEnd(%q) = %q: not UTF-8", tc.prefix, end)
		}
		for _, key := range []string{tc.prefix, tc.prefix + "\x00", tc.prefix + "zzz", tc.prefix + string(rune(unicode.MaxRune))} {
			if ok && !(key < end) {
				t.Errorf("%q begins with %q but is not below %q", key, tc.prefix, end)
			}
		}
		if ok && strings.HasPrefix(end, tc.prefix) {
			t.Errorf("the bound %q itself begins with %q", end, tc.prefix)
		}
	}
}

func TestPageLimit(t *testing.T) {
	for in, want := range map[int]int{-5: 50, 0: 50, 1: 1, 500: 500, 501: MaxListLimit, 1 << 40: MaxListLimit} {
		if got := (ListRequest{Limit: in}).PageLimit(); got != want {
			t.Errorf("PageLimit(%d) = %d, want %d", in, got, want)
		}
	}
}

// Every write of the state machine has its rows: one that writes and one
// that refuses; and every row is one of Ops.
func TestEveryOpHasItsRows(t *testing.T) {
	writes, refusals := map[Op]int{}, map[Op]int{}
	for _, row := range Transitions {
		if !slices.Contains(Ops, row.Op) {
			t.Errorf("row %s %s %s: operation not in Ops", row.From, row.Op, row.When)
		}
		if row.Writes {
			writes[row.Op]++
		} else {
			refusals[row.Op]++
		}
	}
	for _, op := range Ops {
		if writes[op] == 0 || refusals[op] == 0 {
			t.Errorf("%s: %d writing row(s), %d refusal(s): a move needs both in Transitions", op, writes[op], refusals[op])
		}
	}
}
