package audit

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAnchorsTakesSeqAndHashOnly(t *testing.T) {
	hash := strings.Repeat("AB", 32)
	for _, tc := range []struct {
		heads []string
		want  []Anchor
		bad   bool
	}{
		{heads: nil},
		{heads: []string{"7:" + hash}, want: []Anchor{{Seq: 7, Hash: strings.ToLower(hash)}}},
		{heads: []string{"0:" + hash}, bad: true},
		{heads: []string{"x:" + hash}, bad: true},
		{heads: []string{"7"}, bad: true},
		{heads: []string{"7:abc"}, bad: true},
	} {
		got, err := ParseAnchors(tc.heads)
		if (err != nil) != tc.bad || len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("ParseAnchors(%q) = %v, %v", tc.heads, got, err)
		}
	}
}

func TestCheckSaysWhatItCheckedAndWhatBrokeIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	console := newKey(t)
	tr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tr.Sign, tr.SettingsVersion = &Signer{Name: ConsoleSigner, Key: console}, 3
	appendN(t, tr, 3, "olga")
	tr.Close()
	rep, err := verifyFile(t, path)
	if err != nil {
		t.Fatal(err)
	}
	ring := Keyring{}
	ring.Add(Key{Name: ConsoleSigner, Pub: console.Public().(ed25519.PublicKey)})
	head := Anchor{Seq: rep.HeadSeq, Hash: rep.HeadHash}
	for _, tc := range []struct {
		name string
		o    CheckOptions
		want string // in the printed summary, or in the error
		path bool   // a file that cannot be read: its *fs.PathError
	}{
		{name: "chain only", o: CheckOptions{Files: []string{path}, ChainOnly: true}, want: "3 line(s), chain whole; signatures not checked (--chain-only)\nhead: seq 3"},
		{name: "no settings", o: CheckOptions{Files: []string{path}}, want: "signatures not checked: the backend keeps no four-eyes settings"},
		{name: "keyed, anchored", o: CheckOptions{Files: []string{path}, Keys: ring, KeptVersion: 3, Anchors: []Anchor{head}}, want: "3 signed, each vouched for by its writer's key\nholds the 1 logged head(s) given\n"},
		{name: "rolled back", o: CheckOptions{Files: []string{path}, Keys: ring, KeptVersion: 2}, want: "the audit trail is broken: seq 1 was written under four-eyes settings version 3, and the backend keeps version 2"},
		{name: "head not held", o: CheckOptions{Files: []string{path}, Anchors: []Anchor{{Seq: 2, Hash: head.Hash}}}, want: "the audit trail is broken: "},
		{name: "no file", o: CheckOptions{Files: []string{filepath.Join(dir, "gone.jsonl")}}, path: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Check(tc.o)
			if tc.path {
				if pe := (*fs.PathError)(nil); !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a *fs.PathError", err)
				}
				return
			}
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				var b strings.Builder
				c.Print(&b)
				got = b.String()
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want it to hold %q", got, tc.want)
			}
		})
	}
}

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

func TestTheWitnessSeesEveryLineAndACutTail(t *testing.T) {
	path, tr := openTrail(t)
	defer tr.Close()
	w := NewWitness(path)
	var seen []int64
	note := func(seq int64, _ string) { seen = append(seen, seq) }
	for i := range 3 {
		if _, err := tr.Append(Entry{Operator: "ivan", Action: "approve", Result: "approved"}); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := w.Check(note); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, _ := os.ReadFile(path)
	if _, err := tr.Append(Entry{Operator: "ivan", Action: "reject", Result: "rejected"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(note); err != nil || len(seen) != 4 || seen[3] != 4 {
		t.Fatalf("seen %v, %v", seen, err)
	}
	// The reject line, the last, is cut: the chain stays whole, the
	// witness says so.
	if err := os.WriteFile(path, before, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(note); !errors.Is(err, ErrCut) {
		t.Fatalf("a cut tail: %v", err)
	}
	// ... and a line appended after the cut does not hide it.
	if _, err := tr.Append(Entry{Operator: "olga", Action: "execute", Result: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(note); !errors.Is(err, ErrCut) {
		t.Fatalf("a cut tail, written over: %v", err)
	}
}

func TestTheWitnessFollowsARotation(t *testing.T) {
	path, tr := openTrail(t)
	dir := filepath.Dir(path)
	defer tr.Close()
	w := NewWitness(path)
	if _, err := tr.Append(Entry{Operator: "olga", Action: "redrive", Result: "moved"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Rotate(filepath.Join(dir, "old.jsonl"), Entry{Operator: "olga"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(nil); err != nil {
		t.Fatalf("after a rotation: %v", err)
	}
	if seq, _ := w.Seen(); seq != 2 {
		t.Fatalf("seen up to %d, want 2", seq)
	}
	// A file put in its place that does not go on from the last line.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Append(Entry{Operator: "olga", Action: "redrive", Result: "moved"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(nil); !errors.Is(err, ErrCut) {
		t.Fatalf("a new chain in the trail's place: %v", err)
	}
}

// A line rewritten in the middle (a reject blanked out with spaces of the
// same length), or one copied in, is seen as well as a cut tail.
func TestTheWitnessSeesARewriteAnywhere(t *testing.T) {
	for _, tc := range []struct {
		name  string
		forge func(t *testing.T, path string, raw []byte)
	}{
		{"a middle line blanked out", func(t *testing.T, path string, raw []byte) {
			lines := bytes.SplitAfter(raw, []byte("\n"))
			lines[1] = append(bytes.Repeat([]byte(" "), len(lines[1])-1), '\n')
			if err := os.WriteFile(path, bytes.Join(lines, nil), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"an old line copied to the end", func(t *testing.T, path string, raw []byte) {
			lines := bytes.SplitAfter(raw, []byte("\n"))
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(lines[1])
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, tr := openTrail(t)
			defer tr.Close()
			w := NewWitness(path)
			for _, a := range []string{"approve", "reject", "batch"} {
				if _, err := tr.Append(Entry{Operator: "ivan", Action: a, Result: a}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Check(nil); err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(path)
			tc.forge(t, path, raw)
			if err := w.Check(nil); !errors.Is(err, ErrCut) {
				t.Fatalf("%s: %v", tc.name, err)
			}
		})
	}
}
