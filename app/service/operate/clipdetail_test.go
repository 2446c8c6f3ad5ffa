package operate

import (
	"strings"
	"testing"
)

// dlq list's detail column is cut before a word, never inside a masked
// account (issue 54 item 7: "account ********78…" read as another mask).
func TestDLQListCutsTheDetailBeforeAWord(t *testing.T) {
	long := "debit declined: INSUFFICIENT_FUNDS: declined by core banking: account ********7801"
	got := clipDetail(long)
	if strings.Contains(got, "********78") || !strings.HasSuffix(got, " …") || len(got) > 84 {
		t.Fatalf("clipDetail(%q) = %q", long, got)
	}
	if got != "debit declined: INSUFFICIENT_FUNDS: declined by core banking: account …" {
		t.Fatalf("clipDetail = %q", got)
	}
	if short := "debit declined: ACCOUNT_CLOSED"; clipDetail(short) != short {
		t.Fatalf("a short detail is cut: %q", clipDetail(short))
	}
	// One long word: cut inside it, as before.
	word := strings.Repeat("x", 100)
	if got := clipDetail(word); got != strings.Repeat("x", 80)+" …" {
		t.Fatalf("clipDetail(word) = %q", got)
	}
}
