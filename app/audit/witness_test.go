package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

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
