// Package audit is the operators' one audit trail: every action taken from
// the console or the command line (redrive, reopen, renotify, proposals
// and their approvals, sign-ins), one JSON line each, appended and synced
// before the action's answer is given, in one file that every process of
// the host writes (an exclusive flock around each append).
//
// The trail is tamper-evident: each line carries the SHA-256 of the line
// before it (prev) and a sequence number (seq), so that an edited, removed
// or inserted line breaks the chain at the next one, which Verify names.
// The last line has no successor: Verify prints the chain's head (its seq
// and hash), and every append logs it, so a log kept elsewhere anchors the
// end of the file too.
package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// Entry is one line of the trail: one schema for the console and the
// command line.
type Entry struct {
	// Seq numbers the lines of a file from 1; Prev is the hex SHA-256 of
	// the line before ("" for the first line of a file). Append sets both.
	Seq  int64  `json:"seq,omitempty"`
	Prev string `json:"prev,omitempty"`

	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	Role     string    `json:"role"`
	// Action: redrive, reopen, reopen --new-attempt, renotify, propose,
	// approve, reject, expire, execute, batch, signin, signout, refused.
	Action   string `json:"action"`
	ChargeID string `json:"chargeId,omitempty"`
	DLQID    string `json:"dlqId,omitempty"`
	// Proposal names the proposal an action belongs to (bulk actions and
	// those that need a second operator's approval).
	Proposal string `json:"proposal,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Result   string `json:"result"`
	Detail   string `json:"detail,omitempty"`
	Remote   string `json:"remote,omitempty"`
	// Via is where the action came from: console or cli.
	Via string `json:"via,omitempty"`
	// Charges are the charge ids one line of a bulk action touched (a
	// batch), Held and Failed those it held back or could not act on.
	Charges []string `json:"charges,omitempty"`
	Held    []string `json:"held,omitempty"`
	Failed  []string `json:"failed,omitempty"`

	// Digest is what a line vouches for (a proposal's content, for its
	// propose and approve lines).
	Digest string `json:"digest,omitempty"`

	// Signer is who vouches for the line ("console", or the operator
	// named), KeyID the key that signed it (KeyID of its public key), Sig
	// the signature, the line's last field (see Signer). Append sets them
	// when the trail has a Sign.
	Signer string `json:"signer,omitempty"`
	KeyID  string `json:"keyId,omitempty"`
	// Settings is the version of the four-eyes settings the writer acted
	// under (0: none kept): an operator's line never goes below a version
	// an earlier line was written under (settings rolled back in the
	// database show so).
	Settings int    `json:"settings,omitempty"`
	Sig      string `json:"sig,omitempty"`

	raw []byte // the line as read (Recent, All), for Vouched

	// Hash is the line's own SHA-256 (the next line's Prev), set by
	// Append and Recent; not written.
	Hash string `json:"-"`
}

// MaxLine is the longest line the trail writes or reads (a batch line
// names at most a few hundred charges).
const MaxLine = 1 << 20

// Trail is an append-only file of Entry, one JSON line each, mode 0600.
// Every process may hold one on the same file: appends are serialised by
// an exclusive flock, so the chain stays whole.
type Trail struct {
	mu   sync.Mutex
	path string
	f    *os.File
	// Head is called after each append with the line's seq and hash (the
	// chain's new head), for a log kept elsewhere; may be nil.
	Head func(seq int64, hash string)
	// Sign, when set, signs every line appended (see Signer).
	Sign *Signer
	// RequireSign refuses to append a line without Sign (ErrUnsigned): a
	// signed trail takes no unsigned line.
	RequireSign bool
	// SettingsVersion is stamped on every line appended (Entry.Settings).
	SettingsVersion int
}

// ErrUnsigned: a line for a signed trail with no key to sign it.
var ErrUnsigned = errors.New("audit: this trail is signed, and this process has no key to sign with")

// Open opens (or creates, mode 0600) the trail at path; an existing file
// that others may read or write is tightened to 0600.
func Open(path string) (*Trail, error) {
	if path == "" {
		return nil, errors.New("no audit file given")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit file: %w", err)
	}
	if st.Mode().IsRegular() && st.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("audit file %s is open to others (mode %04o) and could not be made 0600: %w", path, st.Mode().Perm(), err)
		}
	}
	return &Trail{path: path, f: f}, nil
}

// Path is the file's path.
func (a *Trail) Path() string { return a.path }

// Append chains e to the last line of the file, writes it and syncs it;
// it returns e as written (with Seq and Prev).
func (a *Trail) Append(e Entry) (Entry, error) {
	if a.RequireSign && a.Sign == nil {
		return e, ErrUnsigned
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var t tail
	for attempt := 0; ; attempt++ {
		carried, err := a.reopenIfMoved()
		if err != nil {
			return e, fmt.Errorf("audit file: %w", err)
		}
		if st, err := a.f.Stat(); err == nil && !st.Mode().IsRegular() {
			break // a device (tests use /dev/full)
		}
		if err := syscall.Flock(int(a.f.Fd()), syscall.LOCK_EX); err != nil {
			return e, fmt.Errorf("audit file: lock: %w", err)
		}
		// A rotation may have moved the file while this one waited for
		// the lock: the line goes where the trail now is.
		if moved, err := a.moved(); err != nil || (moved && attempt < 3) {
			_ = syscall.Flock(int(a.f.Fd()), syscall.LOCK_UN)
			if err != nil {
				return e, fmt.Errorf("audit file: %w", err)
			}
			continue
		}
		defer func() { _ = syscall.Flock(int(a.f.Fd()), syscall.LOCK_UN) }()
		if t, err = readTail(a.f); err != nil {
			return e, fmt.Errorf("audit file %s: %w", a.path, err)
		}
		if t.seq == 0 && t.hash == "" && !t.torn && carried.hash != "" {
			// A new file after a rotation by rename: it goes on from the
			// last line of the file this trail held.
			t = carried
		}
		break
	}
	e.Seq, e.Prev = t.seq+1, t.hash
	e.Signer, e.KeyID, e.Sig, e.Settings = "", "", "", a.SettingsVersion
	if a.Sign != nil {
		e.Signer, e.KeyID = a.Sign.Name, KeyID(a.Sign.Key.Public().(ed25519.PublicKey))
		if e.Signer != ConsoleSigner && !strings.EqualFold(strings.TrimSpace(e.Operator), e.Signer) {
			// An operator's key writes in her own name only: a line a
			// process of hers writes for another (an expiry by "system")
			// says so in its detail.
			e.Detail = strings.TrimSpace("for " + e.Operator + ": " + e.Detail)
			e.Operator = e.Signer
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if a.Sign != nil {
		b = signLine(b, a.Sign)
	}
	if len(b) >= MaxLine {
		return e, fmt.Errorf("audit line of %d bytes is over the %d-byte limit", len(b), MaxLine)
	}
	line := append(b, '\n')
	if t.torn {
		// A write cut short left half a line: the next starts on a line
		// of its own, chained to the last whole one.
		line = append([]byte{'\n'}, line...)
	}
	if _, err := a.f.Write(line); err != nil {
		return e, fmt.Errorf("audit file: %w", err)
	}
	if err := a.f.Sync(); err != nil {
		return e, fmt.Errorf("audit file: %w", err)
	}
	e.Hash, e.raw = Hash(b), b
	if a.Sign != nil {
		e.Sig = string(b[bytes.LastIndex(b, []byte(sigField))+len(sigField) : len(b)-2])
	}
	if a.Head != nil {
		a.Head(e.Seq, e.Hash)
	}
	return e, nil
}

// Hash is the hex SHA-256 of a line (without its newline): the next
// line's Prev.
func Hash(line []byte) string {
	s := sha256.Sum256(line)
	return hex.EncodeToString(s[:])
}

// tail is what the end of a file says about the chain.
type tail struct {
	seq  int64  // of the last whole line (0 for none, or a line written before the chain)
	hash string // of the last whole line
	line []byte // the last whole line
	torn bool   // the file does not end in a newline
}

// readTail reads the last whole line of f.
func readTail(f *os.File) (tail, error) {
	st, err := f.Stat()
	if err != nil {
		return tail{}, err
	}
	size := st.Size()
	if size == 0 {
		return tail{}, nil
	}
	n := min(size, int64(2*MaxLine))
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, size-n); err != nil && !errors.Is(err, io.EOF) {
		return tail{}, err
	}
	var t tail
	if buf[len(buf)-1] != '\n' {
		// A write cut short: a whole entry that lacks only its newline is
		// the last line; anything else is a fragment the chain skips.
		t.torn = true
		i := bytes.LastIndexByte(buf, '\n')
		if i < 0 && n < size {
			return tail{}, errors.New("its last line is longer than the limit")
		}
		if seq, ok := entrySeq(buf[i+1:]); ok {
			t.seq, t.hash, t.line = seq, Hash(buf[i+1:]), append([]byte(nil), buf[i+1:]...)
			return t, nil
		}
		buf = buf[:i+1]
	}
	for len(buf) > 0 {
		buf = buf[:len(buf)-1] // the newline
		i := bytes.LastIndexByte(buf, '\n')
		if i < 0 && n < size {
			return tail{}, errors.New("its last line is longer than the limit")
		}
		line := buf[i+1:]
		buf = buf[:i+1]
		if seq, ok := entrySeq(line); ok {
			t.seq, t.hash, t.line = seq, Hash(line), append([]byte(nil), line...)
			return t, nil
		}
		// Blank, or a fragment a later write started a new line after:
		// the chain goes on from the last whole line before it.
	}
	return t, nil
}

// entrySeq is the seq of a line that is a JSON object (0 for a line
// written before the chain).
func entrySeq(line []byte) (int64, bool) {
	if len(bytes.TrimSpace(line)) == 0 {
		return 0, false
	}
	var e struct {
		Seq int64 `json:"seq"`
	}
	if json.Unmarshal(line, &e) != nil {
		return 0, false
	}
	return e.Seq, true
}

// moved says whether the file held is no longer the one at the path.
func (a *Trail) moved() (bool, error) {
	held, err := a.f.Stat()
	if err != nil {
		return false, err
	}
	if !held.Mode().IsRegular() {
		return false, nil
	}
	there, err := os.Stat(a.path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !os.SameFile(held, there), nil
}

// reopenIfMoved opens the file at the path again when the one held is no
// longer there — deleted, or rotated away (renamed, a new file created):
// lines must go where the trail is read, never into an unlinked inode or
// yesterday's file. It returns the tail of the file it let go, so that a
// new, empty file goes on from it (one chain across a rotation).
func (a *Trail) reopenIfMoved() (tail, error) {
	moved, err := a.moved()
	if err != nil || !moved {
		return tail{}, err
	}
	old, _ := readTail(a.f)
	f, err := os.OpenFile(a.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return tail{}, err
	}
	_ = a.f.Close()
	a.f = f
	old.torn = false
	return old, nil
}

// Rotate moves the trail to the path to (which must not exist) and starts
// a new file at its path whose first line goes on from the moved file's
// last: one chain across files, which Verify of the two, in order, checks.
func (a *Trail) Rotate(to string, who Entry) (Entry, error) {
	a.mu.Lock()
	if _, err := a.reopenIfMoved(); err != nil {
		a.mu.Unlock()
		return who, fmt.Errorf("audit file: %w", err)
	}
	if err := syscall.Flock(int(a.f.Fd()), syscall.LOCK_EX); err != nil {
		a.mu.Unlock()
		return who, fmt.Errorf("audit file: lock: %w", err)
	}
	if _, err := os.Lstat(to); err == nil {
		_ = syscall.Flock(int(a.f.Fd()), syscall.LOCK_UN)
		a.mu.Unlock()
		return who, fmt.Errorf("%s exists: rotate to a new name", to)
	}
	err := os.Link(a.path, to)
	if err == nil {
		err = os.Remove(a.path)
	}
	_ = syscall.Flock(int(a.f.Fd()), syscall.LOCK_UN)
	a.mu.Unlock()
	if err != nil {
		return who, fmt.Errorf("rotate %s to %s: %w", a.path, to, err)
	}
	who.Action, who.Result = "rotate", "rotated"
	who.Detail = "the lines before this one are in " + to
	return a.Append(who) // chained to the moved file's last line
}

// Close closes the file.
func (a *Trail) Close() error {
	if a == nil {
		return nil
	}
	return a.f.Close()
}

// Filter chooses entries; an empty field matches every entry.
type Filter struct {
	Operator, Action, ChargeID, Proposal, Via string
	Since                                     time.Time
}

// names says whether id, an entry's charge id, is f's: as f names it, or
// as every view shows it (charge.ShowID) — a command line's audit line
// holds a charge id that carries an account masked so.
func (f Filter) names(id string) bool {
	return id == f.ChargeID || id != "" && id == charge.ShowID(f.ChargeID)
}

// Match says whether e passes f (Action matches a prefix: "reopen"
// matches "reopen --new-attempt").
func (f Filter) Match(e Entry) bool {
	return (f.Operator == "" || strings.EqualFold(e.Operator, f.Operator)) &&
		(f.Action == "" || strings.HasPrefix(e.Action, f.Action)) &&
		(f.ChargeID == "" || f.names(e.ChargeID) || contains(e.Charges, f.ChargeID) || contains(e.Held, f.ChargeID) || contains(e.Failed, f.ChargeID)) &&
		(f.Proposal == "" || e.Proposal == f.Proposal) &&
		(f.Via == "" || e.Via == f.Via) &&
		(f.Since.IsZero() || !e.At.Before(f.Since))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// recentWindow is how much of the file's end Recent reads: the audit page
// never scans a trail of months.
const recentWindow = 8 << 20

// Recent returns the last n entries that pass f, newest first, from the
// file's last few MiB. It takes no lock an append needs: an audit page
// never holds an action up.
func (a *Trail) Recent(n int, f Filter) ([]Entry, error) {
	file, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	var r io.Reader = file
	if st.Size() > recentWindow {
		if _, err := file.Seek(st.Size()-recentWindow, io.SeekStart); err != nil {
			return nil, err
		}
		br := bufio.NewReader(file)
		if _, err := br.ReadString('\n'); err != nil { // the first line is cut
			return nil, err
		}
		r = br
	}
	return lastEntries(r, n, f)
}

// All returns every entry of the file that passes f, oldest first (a
// whole scan: for checks at the start of a run, not for pages).
func (a *Trail) All(f Filter) ([]Entry, error) {
	file, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var out []Entry
	err = scanEntries(file, f, func(e Entry) { out = append(out, e) })
	return out, err
}

// scanEntries calls each for every line of r that is an entry passing f,
// in order (a line that is not JSON is passed over).
func scanEntries(r io.Reader, f Filter, each func(Entry)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || !f.Match(e) {
			continue
		}
		e.Hash = Hash(sc.Bytes())
		e.raw = append([]byte(nil), sc.Bytes()...)
		each(e)
	}
	return sc.Err()
}

func lastEntries(r io.Reader, n int, f Filter) ([]Entry, error) {
	ring := make([]Entry, n) // the last n, ring[seen%n] next
	seen := 0
	err := scanEntries(r, f, func(e Entry) {
		ring[seen%n] = e
		seen++
	})
	out := make([]Entry, 0, min(seen, n))
	for i := seen - 1; i >= 0 && i >= seen-n; i-- {
		out = append(out, ring[i%n])
	}
	return out, err
}

// Last is the trail's last whole line (zero Entry for none).
func (a *Trail) Last() (Entry, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	t, err := readTail(f)
	if err != nil || t.line == nil {
		return Entry{}, err
	}
	var e Entry
	if err := json.Unmarshal(t.line, &e); err != nil {
		return Entry{}, err
	}
	e.Hash, e.raw = t.hash, t.line
	return e, nil
}

// HeadSeq is the seq of the trail's last whole line (0 for none).
func (a *Trail) HeadSeq() (int64, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	t, err := readTail(f)
	return t.seq, err
}
