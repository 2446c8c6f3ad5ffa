package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrCut: a trail no longer holds a line a Witness saw in it (lines cut
// from its end, or the file rewritten).
var ErrCut = errors.New("audit trail cut or rewritten")

// Witness follows a trail from outside its writers (the console, under
// its own account, every Refresh): it reads each whole line as it is
// appended — by any process — and hands its seq and hash to seen (the
// console logs them as "audit head", in a log the operators do not
// write), and it remembers the last line it saw. A trail later found not
// to hold that line (an operator's own lines, or another's, cut from the
// end; the file rewritten) is ErrCut: what the writers' own logged heads
// cannot show when the last writer was the operator's own command line.
type Witness struct {
	path      string
	file      os.FileInfo // the file read last (a rotation replaces it)
	start     int64       // where the last line seen starts (-1: none)
	end       int64       // just past its newline
	seq       int64
	hash      string
	prefix    [sha256.Size]byte // of the file's bytes [0, end): a line rewritten anywhere shows
	rotatedTo bool              // the file was replaced: its first line must follow the last seen
}

// NewWitness follows the trail at path.
func NewWitness(path string) *Witness { return &Witness{path: path, start: -1} }

// Seen is the seq and hash of the last line the witness saw.
func (w *Witness) Seen() (int64, string) { return w.seq, w.hash }

// Check reads what was appended since the last Check, calling seen for
// each whole line, and returns ErrCut (wrapped, naming the line) when the
// trail no longer holds the last line seen. After ErrCut the witness keeps
// what it saw: every later Check says so again, until the line is back.
func (w *Witness) Check(seen func(seq int64, hash string)) error {
	f, err := os.Open(w.path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return nil // a device (tests use /dev/full): nothing to follow
	}
	if w.file != nil && !os.SameFile(w.file, st) {
		// Rotated (or replaced): the new file goes on from the last line
		// seen, or it is not the trail.
		w.start, w.end, w.rotatedTo = -1, 0, true
	}
	if st.Size() < w.end {
		return fmt.Errorf("%w: seq %d (sha256 %.12s…), seen there before, is gone: the file is %d bytes, the line ended at %d", ErrCut, w.seq, w.hash, st.Size(), w.end)
	}
	if w.end > 0 {
		// Everything seen, not only the last line: a line rewritten in the
		// middle (a reject blanked out) shows as well as a cut tail.
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, w.end)); err != nil {
			return err
		}
		if !bytes.Equal(h.Sum(nil), w.prefix[:]) {
			return fmt.Errorf("%w: the file's first %d bytes, up to seq %d (sha256 %.12s…), are not what the console saw there: a line was rewritten or removed", ErrCut, w.end, w.seq, w.hash)
		}
	}
	if _, err := f.Seek(w.end, io.SeekStart); err != nil {
		return err
	}
	w.file = st
	prefix := sha256.New()
	if _, err := io.Copy(prefix, io.NewSectionReader(f, 0, w.end)); err != nil {
		return err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	pos := w.end
	for {
		line, err := readLine(br)
		if errors.Is(err, errLongLine) {
			return fmt.Errorf("%w: after seq %d, a line longer than %d bytes: not written by the trail", ErrCut, w.seq, MaxLine)
		}
		if len(line) == 0 || !bytes.HasSuffix(line, []byte{'\n'}) {
			return nil // the end, or a line still being written
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		start := pos
		pos += int64(len(line))
		prefix.Write(line)
		body := bytes.TrimSuffix(line, []byte{'\n'})
		seq, ok := entrySeq(body)
		if !ok || seq == 0 {
			continue // a fragment, a blank or a line before the chain
		}
		var e struct {
			Prev string `json:"prev"`
		}
		if w.hash != "" && (json.Unmarshal(body, &e) != nil || e.Prev != w.hash || seq != w.seq+1) {
			// Every line goes on from the one seen before it — across a
			// rotation too: lines copied in, or a new chain in the trail's
			// place, do not.
			if w.rotatedTo {
				return fmt.Errorf("%w: the file at %s was replaced, and its first line (seq %d) does not follow seq %d seen before", ErrCut, w.path, seq, w.seq)
			}
			return fmt.Errorf("%w: seq %d does not follow seq %d seen before it (a line inserted, copied in or rewritten)", ErrCut, seq, w.seq)
		}
		w.rotatedTo = false
		copy(w.prefix[:], prefix.Sum(nil))
		w.start, w.end, w.seq, w.hash = start, pos, seq, Hash(body)
		if seen != nil {
			seen(seq, w.hash)
		}
	}
}

var errLongLine = errors.New("line over the limit")

// readLine reads one line (with its newline) of at most MaxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > MaxLine {
			return nil, errLongLine
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}
