package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Report is what Verify found in a trail.
type Report struct {
	// Lines are the whole lines read; Legacy those at the start written
	// before the trail was chained (no seq), which nothing protects.
	Lines, Legacy int
	// Torn are fragments of writes cut short (a crash, a full disk) that
	// the chain skips: the next line chains to the whole line before.
	Torn []int
	// HeadSeq and HeadHash are the last line's: compare them with the
	// head logged elsewhere to see that no line was cut from the end.
	HeadSeq  int64
	HeadHash string
	// Signed are the lines whose signature the keyring checked; Unsigned
	// those before the first signed line (written before the installation
	// kept keys: nothing vouches for them); Unchecked the signed lines read
	// without a keyring.
	Signed, Unsigned, Unchecked int
	// Settings is the highest settings version a line was written under,
	// SettingsSeq that line's seq.
	Settings    int
	SettingsSeq int64
}

// BreakError is a broken chain: the line named does not follow the one
// before it (that line, or this one, was edited, removed or inserted).
type BreakError struct {
	File  string
	Line  int
	Why   string
	vouch bool // no writer vouched for the line (ErrNotVouched)
}

func (e *BreakError) Error() string {
	return fmt.Sprintf("%s line %d: %s", e.File, e.Line, e.Why)
}

// ErrBroken is matched (errors.Is) by every BreakError.
var ErrBroken = errors.New("audit trail broken")

// Is makes a BreakError match ErrBroken.
func (e *BreakError) Is(target error) bool {
	return target == ErrBroken || (e.vouch && target == ErrNotVouched)
}

// Anchor is a line's seq and hash as logged elsewhere when it was
// written (the console's "audit head" lines): the trail must hold that
// very line. A line cut from the end, or a trail edited and chained
// again, fails it.
type Anchor struct {
	Seq  int64
	Hash string
}

// Verify reads a trail from r (named file in errors) and checks its chain:
// every line after the first chained one must carry the hash of the line
// before and the next seq. prev is the head of the file before this one
// when files are checked in order ("" for none: the first chained line
// must then be seq 1, or follow legacy lines).
func Verify(r io.Reader, file string, prev Report, anchors ...Anchor) (Report, error) {
	return VerifyKeyed(r, file, prev, nil, anchors...)
}

// VerifyKeyed is Verify that also checks every line's signature against
// keys (nil: signatures are not checked, only counted): a line no key of
// keys vouches for is a BreakError (matching ErrNotVouched too), and so
// is an unsigned line once a signed one has been read — a line appended
// by hand, however well chained, is refused.
func VerifyKeyed(r io.Reader, file string, prev Report, keys Keyring, anchors ...Anchor) (Report, error) {
	return verifyKeyed(r, file, prev, keys, anchors, map[string]int64{})
}

// verifyKeyed is VerifyKeyed with the proposals proposed in the files
// read before (by id, the seq of their propose line): a second propose
// line in a later file breaks the trail as one in the same file does.
func verifyKeyed(r io.Reader, file string, prev Report, keys Keyring, anchors []Anchor, proposed map[string]int64) (Report, error) {
	rep, err := verify(r, file, prev, keys, anchors, proposed)
	if err != nil {
		return rep, err
	}
	for _, a := range anchors {
		if a.Seq > rep.HeadSeq {
			return rep, &BreakError{File: file, Line: 0, Why: fmt.Sprintf("the trail ends at seq %d, but seq %d was logged: lines were cut from its end", rep.HeadSeq, a.Seq)}
		}
	}
	return rep, nil
}

func verify(r io.Reader, file string, prev Report, keys Keyring, anchors []Anchor, proposed map[string]int64) (Report, error) {
	rep := Report{HeadSeq: prev.HeadSeq, HeadHash: prev.HeadHash, Settings: prev.Settings, SettingsSeq: prev.SettingsSeq}
	signedBefore := prev.Signed > 0
	// proposed: proposal id → the seq of its propose line, in this file
	// and the files before it.
	br := bufio.NewReaderSize(r, 64<<10)
	chained := prev.HeadHash != ""
	lineNo := 0
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: read it whole, up to the limit.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(full) < MaxLine {
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				return rep, &BreakError{File: file, Line: lineNo + 1, Why: fmt.Sprintf("a line longer than %d bytes: not written by the trail", MaxLine)}
			}
			line = full
		}
		if len(line) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				return rep, nil
			}
			return rep, fmt.Errorf("%s: %w", file, err)
		}
		lineNo++
		line = bytes.TrimSuffix(line, []byte{'\n'})
		var e struct {
			Seq      int64  `json:"seq"`
			Prev     string `json:"prev"`
			Settings int    `json:"settings"`
			Action   string `json:"action"`
			Proposal string `json:"proposal"`
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if json.Unmarshal(line, &e) != nil {
			// A fragment of a write cut short (the next write started a
			// line of its own): only the start of the line that write was
			// writing, the one after the head. The chain skips it, and the
			// next line must chain to the line before it.
			if !fragmentOf(line, rep.HeadSeq+1, rep.HeadHash) {
				return rep, &BreakError{File: file, Line: lineNo, Why: "not a line of the trail, nor the start of one cut short: inserted, or edited"}
			}
			rep.Torn = append(rep.Torn, lineNo)
			if errors.Is(err, io.EOF) {
				return rep, nil
			}
			continue
		}
		rep.Lines++
		switch {
		case e.Seq == 0 && !chained:
			rep.Legacy++ // before the chain: nothing to check
		case e.Seq == 0:
			return rep, &BreakError{File: file, Line: lineNo, Why: "a line without seq after the chain began: inserted, or edited"}
		case !chained && rep.Legacy == 0 && (e.Seq != 1 || e.Prev != ""):
			return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("the file starts at seq %d: lines before it are missing (or give the file before it first)", e.Seq)}
		case e.Prev != rep.HeadHash:
			return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d does not carry the hash of the line before it: that line or this one was edited, removed or inserted", e.Seq)}
		case chained && e.Seq != rep.HeadSeq+1:
			return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d follows seq %d: a line is missing or repeated", e.Seq, rep.HeadSeq)}
		}
		if e.Action == "propose" && e.Proposal != "" {
			if first, ok := proposed[e.Proposal]; ok {
				return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d is a second propose line for %s (the first is seq %d): a proposal is proposed once, so this one was written by hand", e.Seq, e.Proposal, first), vouch: true}
			}
			proposed[e.Proposal] = e.Seq
		}
		if e.Seq != 0 {
			chained = true
			switch who, err := checkLine(line, keys); {
			case keys == nil && bytes.Contains(line, []byte(sigField)):
				rep.Unchecked++
			case keys == nil:
			case err != nil:
				return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d: %v", e.Seq, err), vouch: true}
			case who == "" && (signedBefore || rep.Signed > 0):
				return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d is not signed, after signed lines: appended or inserted by hand (no writer vouched for it)", e.Seq), vouch: true}
			case who == "":
				rep.Unsigned++
			case who != ConsoleSigner && e.Settings < rep.Settings:
				return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d was written under four-eyes settings version %d, after lines under version %d: the settings were rolled back in the database", e.Seq, e.Settings, rep.Settings), vouch: true}
			default:
				rep.Signed++
			}
			if e.Settings > rep.Settings {
				rep.Settings, rep.SettingsSeq = e.Settings, e.Seq
			}
		}
		rep.HeadSeq, rep.HeadHash = e.Seq, Hash(line)
		for _, a := range anchors {
			if a.Seq == e.Seq && a.Hash != rep.HeadHash {
				return rep, &BreakError{File: file, Line: lineNo, Why: fmt.Sprintf("seq %d is not the line logged when it was written (sha256 %.12s…, logged %.12s…): the trail was edited and chained again", e.Seq, rep.HeadHash, a.Hash)}
			}
		}
		if errors.Is(err, io.EOF) {
			return rep, nil
		}
	}
}

// fragmentOf says whether line is the start of the line seq would have
// been, chained to prev: what a write cut short leaves.
func fragmentOf(line []byte, seq int64, prev string) bool {
	want := fmt.Sprintf(`{"seq":%d,"prev":%q,`, seq, prev)
	if prev == "" {
		want = fmt.Sprintf(`{"seq":%d,`, seq)
	}
	n := min(len(line), len(want))
	return n > 0 && string(line[:n]) == want[:n]
}

// FirstOf is the Report to verify a file from its own first line on
// (VerifyKeyed's prev): the chain as that line says it went on, for a
// file whose earlier lines are in a rotated file not read here. With a
// signed first line, every later line must be signed too.
func FirstOf(r io.Reader) (Report, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e struct {
				Seq  int64  `json:"seq"`
				Prev string `json:"prev"`
			}
			if json.Unmarshal(bytes.TrimSpace(line), &e) == nil && e.Seq > 0 {
				rep := Report{HeadSeq: e.Seq - 1, HeadHash: e.Prev}
				if bytes.Contains(line, []byte(sigField)) {
					rep.Signed = 1
				}
				return rep, nil
			}
		}
		if err != nil {
			return Report{}, nil // no chained line: from the start
		}
	}
}
