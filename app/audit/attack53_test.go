package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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

// audit list is a reader: given a path that is not the trail (a typo),
// it created an empty file there and said, exit 0, that nothing was
// done — the all-clear of a trail that is elsewhere.
func TestAttack53MovedRecentInOfNoFileCreatesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audti.jsonl")
	es, err := RecentIn(path, 10, Filter{})
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RecentIn of no file: %v, %v; want it not found", es, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RecentIn created %s: %v", path, err)
	}
}

// audit verify refuses a second propose line for a proposal (a proposal
// is proposed once: the second was written by hand) — within a file. The
// book reads the current file only, so after a rotation a second propose
// line of an old proposal in the new file is the only one it sees; and
// audit verify of both files, checking each on its own, passed it.
func TestAttack53MovedASecondProposeLineAfterARotationBreaksTheTrail(t *testing.T) {
	dir := t.TempDir()
	path, moved := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "audit-1.jsonl")
	tr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Append(Entry{Operator: "olga", Action: "propose", Proposal: "P-0123456789", Result: "pending", Digest: "d1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Rotate(moved, Entry{Operator: "olga"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Append(Entry{Operator: "olga", Action: "propose", Proposal: "P-0123456789", Result: "pending", Digest: "d2"}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if _, err := VerifyFiles([]string{moved, path}, nil, nil); !errors.Is(err, ErrBroken) {
		t.Fatalf("a second propose line in the next file: %v; want the trail broken", err)
	}
}
