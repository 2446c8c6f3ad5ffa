package audit

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// ATTACK: Verify skips any line that is not JSON as "a fragment of a
// write cut short", wherever it is and whatever it says, so text inserted
// between two lines passes: here a made-up approval, written as a JSON
// object with one stray byte after it (a lenient reader, grep, or a
// person reading the file sees an approval that never was).
//
// Expected: Verify accepts a fragment only where a write could have been
// cut short, i.e. a prefix of a line that chains to the line before it
// (starting {"seq":N+1,"prev":"<head>"); any other inserted text breaks
// the chain (a BreakError naming the line).
func TestAttackVerifyAcceptsInsertedNonJSONLine(t *testing.T) {
	path, tr := openTrail(t)
	appendN(t, tr, 3, "olga")
	tr.Close()
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	fake := `{"seq":2,"at":"2026-12-03T08:00:00Z","operator":"ivan","role":"operator","action":"approve","proposal":"P-0123456789","result":"approved","via":"console"}` + "}\n"
	edited := lines[0] + lines[1] + fake + lines[2]
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := verifyFile(t, path)
	if err == nil {
		t.Fatalf("Verify accepted an inserted line (report %+v)", rep)
	}
}

// ATTACK: the chain has no key: whoever can write the file can edit any
// line and compute the prev of every line after it again (SHA-256 of the
// line before, nothing secret). Here an approval by ivan becomes an
// approval by olga (the proposer: four-eyes broken after the fact),
// mid-trail, and the chain is recomputed.
//
// Expected (as built): the chain alone cannot tell, and says so; the head
// every append logs elsewhere (Trail.Head; the console's and the command
// line's "audit head" lines) can: Verify given those anchors fails.
func TestAttackEditedLineRechainedPassesVerify(t *testing.T) {
	path, tr := openTrail(t)
	var logged []Anchor
	tr.Head = func(seq int64, hash string) { logged = append(logged, Anchor{seq, hash}) }
	for _, who := range []string{"olga", "ivan", "olga", "ivan"} {
		if _, err := tr.Append(Entry{Operator: who, Action: "approve", Proposal: "P-0123456789", Result: "approved"}); err != nil {
			t.Fatal(err)
		}
	}
	tr.Close()
	raw, _ := os.ReadFile(path)
	var es []Entry
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e Entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	es[1].Operator = "olga"
	var out []byte
	prev := ""
	for _, e := range es {
		e.Prev = prev
		b, _ := json.Marshal(e)
		out = append(append(out, b...), '\n')
		prev = Hash(b)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	// Any one logged head from the edit on catches it; the last one too.
	if rep, err := Verify(f, path, Report{}, logged[len(logged)-1]); err == nil {
		t.Fatalf("Verify, given the head logged when the last line was written, accepts a trail edited and chained again (report %+v)", rep)
	}
	// And a line cut from the end: the logged head is past the file's.
	cut := out[:len(out)-1]
	cut = cut[:strings.LastIndex(string(cut), "\n")+1]
	if _, err := Verify(strings.NewReader(string(cut)), path, Report{}, Anchor{Seq: 4, Hash: prev}); err == nil || !strings.Contains(err.Error(), "cut from its end") {
		t.Fatalf("Verify of a trail cut short, given its logged head: %v", err)
	}
}

// ATTACK: after a rotation (the file renamed away, as logrotate does) the
// trail starts a new chain at seq 1 with no prev, so the rotated file and
// the new one, given oldest first as the CLI's audit verify asks, never
// verify as one chain; each verifies alone, so whole files can be
// dropped, or replaced by a fresh chain, unseen.
//
// Expected: the new file goes on from the rotated one's head (its first
// line's prev is the old head, seq continues), and Verify of the two in
// order passes.
func TestAttackRotatedTrailNeverVerifiesAsOneChain(t *testing.T) {
	path, tr := openTrail(t)
	defer tr.Close()
	appendN(t, tr, 2, "olga")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendN(t, tr, 2, "ivan")
	rep, err := verifyFile(t, path+".1")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	if _, err := Verify(f, path, rep); err != nil {
		t.Fatalf("the rotated trail, given oldest first, does not verify as one chain: %v", err)
	}
}
