package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func verifyFile(t *testing.T, path string) (Report, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Verify(f, path, Report{})
}

// openTrail opens a trail in a new file of its own.
func openTrail(t *testing.T) (path string, tr *Trail) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "audit.jsonl")
	tr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, tr
}

func appendN(t *testing.T, tr *Trail, n int, who string) {
	t.Helper()
	for i := range n {
		if _, err := tr.Append(Entry{Operator: who, Action: "redrive", ChargeID: fmt.Sprintf("CHG-%s-%d", who, i), Result: "moved"}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAppendChainsEveryLineAndVerifyAcceptsIt(t *testing.T) {
	path, tr := openTrail(t)
	var heads []int64
	tr.Head = func(seq int64, _ string) { heads = append(heads, seq) }
	appendN(t, tr, 5, "olga")
	tr.Close()
	rep, err := verifyFile(t, path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 5 || rep.HeadSeq != 5 || len(rep.Torn) != 0 || fmt.Sprint(heads) != "[1 2 3 4 5]" {
		t.Fatalf("report %+v, heads %v", rep, heads)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if rep.HeadHash != Hash([]byte(lines[4])) {
		t.Fatal("the head is not the last line's hash")
	}
	// A second Trail on the file (another process) goes on with the chain.
	tr2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := tr2.Append(Entry{Operator: "ivan", Action: "approve", Result: "approved"})
	if err != nil || e.Seq != 6 || e.Prev != rep.HeadHash {
		t.Fatalf("append after reopen: %+v %v", e, err)
	}
	tr2.Close()
	if _, err := verifyFile(t, path); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyFindsAnEditedRemovedOrInsertedLine(t *testing.T) {
	path, tr := openTrail(t)
	dir := filepath.Dir(path)
	appendN(t, tr, 6, "olga")
	tr.Close()
	orig, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(orig), "\n")
	lines = lines[:len(lines)-1] // the empty tail
	for _, tc := range []struct {
		name     string
		edit     func([]string) []string
		wantLine int
	}{
		{"a charge id edited", func(l []string) []string {
			l[2] = strings.Replace(l[2], "CHG-olga-2", "CHG-olga-9", 1)
			return l
		}, 4},
		{"a result edited", func(l []string) []string { l[0] = strings.Replace(l[0], `"moved"`, `"held back"`, 1); return l }, 2},
		{"a line removed", func(l []string) []string { return append(l[:3:3], l[4:]...) }, 4},
		{"a line inserted", func(l []string) []string {
			return append(l[:2:2], append([]string{`{"seq":3,"prev":"00","operator":"mallory","action":"redrive","result":"moved"}` + "\n"}, l[2:]...)...)
		}, 3},
		{"two lines swapped", func(l []string) []string { l[1], l[2] = l[2], l[1]; return l }, 2},
		{"the first line removed", func(l []string) []string { return l[1:] }, 1},
		{"a line replaced by garbage", func(l []string) []string { l[3] = "garbage\n"; return l }, 4},
		{"a line replaced by the start of another", func(l []string) []string { l[3] = `{"seq":4,"prev":"00` + "\n"; return l }, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, []byte(strings.Join(tc.edit(append([]string(nil), lines...)), "")), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := verifyFile(t, p)
			var be *BreakError
			if !errors.As(err, &be) || !errors.Is(err, ErrBroken) || be.Line != tc.wantLine {
				t.Fatalf("verify: %v, want a break at line %d", err, tc.wantLine)
			}
		})
	}
}

func TestATornWriteIsSkippedAndTheChainGoesOn(t *testing.T) {
	for _, tc := range []struct{ name, fragment string }{
		{"half a line", `{"seq":4,"prev":"`},      // the hash's start is added below
		{"a whole entry without its newline", ""}, // filled below
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, tr := openTrail(t)
			appendN(t, tr, 3, "olga")
			frag := tc.fragment
			if frag == "" {
				// The last line lost its newline only: it stays in the chain.
				b, _ := os.ReadFile(path)
				if err := os.WriteFile(path, bytes.TrimSuffix(b, []byte("\n")), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				b, _ := os.ReadFile(path)
				ls := strings.Split(strings.TrimSpace(string(b)), "\n")
				frag += Hash([]byte(ls[len(ls)-1]))[:10]
				f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				f.WriteString(frag)
				f.Close()
			}
			e, err := tr.Append(Entry{Operator: "olga", Action: "reopen", Result: "reopened"})
			if err != nil {
				t.Fatal(err)
			}
			tr.Close()
			rep, err := verifyFile(t, path)
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
			if e.Seq != 4 || rep.HeadSeq != 4 || (frag != "") != (len(rep.Torn) == 1) {
				t.Fatalf("entry seq %d, report %+v", e.Seq, rep)
			}
		})
	}
}

func TestLinesFromBeforeTheChainAreCountedAndChainedTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	old := `{"at":"2026-11-30T10:00:00Z","operator":"olga","role":"operator","action":"redrive","result":"moved"}` + "\n"
	if err := os.WriteFile(path, []byte(old+old), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, tr, 2, "ivan")
	tr.Close()
	rep, err := verifyFile(t, path)
	if err != nil || rep.Legacy != 2 || rep.Lines != 4 || rep.HeadSeq != 2 {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestFilesCheckedInOrderMustChain(t *testing.T) {
	path, tr := openTrail(t)
	appendN(t, tr, 2, "olga")
	tr.Close()
	rep, err := verifyFile(t, path)
	if err != nil {
		t.Fatal(err)
	}
	// A file that claims to go on from another head is refused.
	f, _ := os.Open(path)
	defer f.Close()
	if _, err := Verify(f, path, Report{HeadSeq: 7, HeadHash: "ff"}); !errors.Is(err, ErrBroken) {
		t.Fatalf("a file checked after the wrong head: %v", err)
	}
	_ = rep
}

func TestTwoWritersAtOnceKeepOneChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var wg sync.WaitGroup
	for w := range 4 {
		tr, err := Open(path) // one per process: its own file description, so the flock decides
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.Close()
			appendN(t, tr, 50, fmt.Sprintf("op%d", w))
		}()
	}
	wg.Wait()
	rep, err := verifyFile(t, path)
	if err != nil || rep.Lines != 200 || rep.HeadSeq != 200 {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestRecentFilters(t *testing.T) {
	_, tr := openTrail(t)
	defer tr.Close()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i, e := range []Entry{
		{Operator: "olga", Via: "cli", Action: "redrive", ChargeID: "CHG-1", Result: "moved"},
		{Operator: "Ivan", Via: "console", Action: "reopen --new-attempt", ChargeID: "CHG-2", Result: "reopened"},
		{Operator: "olga", Via: "console", Action: "batch", Proposal: "P-1", Charges: []string{"CHG-3", "CHG-4"}, Result: "moved"},
	} {
		e.At = t0.Add(time.Duration(i) * time.Hour)
		if _, err := tr.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, "3 2 1"},
		{Filter{Operator: "ivan"}, "2"},
		{Filter{Via: "cli"}, "1"},
		{Filter{Action: "reopen"}, "2"},
		{Filter{ChargeID: "CHG-4"}, "3"},
		{Filter{Proposal: "P-1"}, "3"},
		{Filter{Since: t0.Add(90 * time.Minute)}, "3"},
	} {
		got, err := tr.Recent(10, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []string
		for _, e := range got {
			seqs = append(seqs, fmt.Sprint(e.Seq))
		}
		if strings.Join(seqs, " ") != tc.want {
			t.Errorf("%+v: %v, want %s", tc.f, seqs, tc.want)
		}
	}
}

func TestTheFileIsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
}

// The audit page never waits for an action: Recent answers while the
// trail's lock is held (an action mid-append, its fsync slow).
func TestRecentTakesNoLockAnActionNeeds(t *testing.T) {
	_, a := openTrail(t)
	defer a.Close()
	if _, err := a.Append(Entry{Operator: "olga", Action: "reopen", Result: "requested"}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		got, err := a.Recent(10, Filter{})
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("%d entries, want 1", len(got))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Recent waits for the lock an action holds")
	}
}

// chargerecovery audit prints a charge id as every view shows it
// (charge.ShowID): one holding an account's digits keeps its last four.
func TestAttack54MaskPrintEntriesChargeID(t *testing.T) {
	var buf bytes.Buffer
	PrintEntries(&buf, []Entry{{Seq: 1, At: time.Now(), Operator: "olga", Via: "console", Action: "redrive", ChargeID: "CHG-001234567890", Result: "moved"},
		{Seq: 2, At: time.Now(), Operator: "olga", Via: "console", Action: "redrive", ChargeID: "CHG-2026-11-000123", Result: "moved"}})
	if out := buf.String(); strings.Contains(out, "12345678") || !strings.Contains(out, "CHG-********7890") || !strings.Contains(out, "CHG-2026-11-000123") {
		t.Errorf("audit lines:\n%s", out)
	}
}

// An entry whose charge id a command line's audit line held masked is
// found by the id as read.
func TestAttack54MaskFilterFindsAMaskedID(t *testing.T) {
	f := Filter{ChargeID: "CHG-001234567890"}
	if !f.Match(Entry{ChargeID: "CHG-********7890"}) || !f.Match(Entry{ChargeID: "CHG-001234567890"}) || f.Match(Entry{ChargeID: "CHG-1"}) {
		t.Error("the filter by charge id does not find the entries of the charge (masked or as read) alone")
	}
}

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
