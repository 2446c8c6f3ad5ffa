package audit

import (
	"strings"
	"testing"
)

// Check of no file at all panicked (the last report of none); Check is
// the package's now, called by others than audit verify.
func TestAttack53MovedCheckOfNoFileIsAnError(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Check of no file panicked: %v", r)
		}
	}()
	if _, err := Check(CheckOptions{}); err == nil {
		t.Fatal("Check of no file said the trail is whole")
	}
}

// --head SEQ:SHA256 took any 64 characters as the hash: a head that is
// not one (a typo, a paste of the wrong field) was then "the trail was
// edited and chained again", an alarm about the trail for a bad flag.
func TestAttack53MovedParseAnchorsWantsHexDigits(t *testing.T) {
	for _, h := range []string{"7:" + strings.Repeat("z", 64), "+7:" + strings.Repeat("a", 64), "7:" + strings.Repeat("a", 63) + " "} {
		if a, err := ParseAnchors([]string{h}); err == nil {
			t.Errorf("ParseAnchors(%q) = %v, want an error", h, a)
		}
	}
}
