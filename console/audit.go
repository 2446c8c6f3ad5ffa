package console

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"
)

// AuditEntry is one action taken from the console, as the audit trail
// keeps it.
type AuditEntry struct {
	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	Role     string    `json:"role"`
	Action   string    `json:"action"` // redrive, reopen, renotify, signin, refused
	ChargeID string    `json:"chargeId,omitempty"`
	DLQID    string    `json:"dlqId,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Result   string    `json:"result"`
	Detail   string    `json:"detail,omitempty"`
	Remote   string    `json:"remote,omitempty"`
}

// AuditLog is an append-only file of AuditEntry, one JSON line each,
// written and synced before the action's answer is sent (mode 0600).
type AuditLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	// torn: a write failed part way, so the file may end in half a line;
	// the next line starts on a line of its own.
	torn bool
}

// OpenAuditLog opens (or creates, mode 0600) the audit file at path; an
// existing file that others may read or write is tightened to 0600.
func OpenAuditLog(path string) (*AuditLog, error) {
	if path == "" {
		return nil, errors.New("the console needs an audit file")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
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
	return &AuditLog{path: path, f: f}, nil
}

// Append writes e and syncs it to disk.
func (a *AuditLog) Append(e AuditEntry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line := append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.reopenIfMoved(); err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	if a.torn {
		line = append([]byte{'\n'}, line...)
	}
	if n, err := a.f.Write(line); err != nil {
		a.torn = a.torn || n > 0
		return fmt.Errorf("audit file: %w", err)
	}
	a.torn = false
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	return nil
}

// reopenIfMoved opens the file at the path again when the one held is no
// longer there — deleted, or rotated away (renamed, a new file created):
// lines must go where the trail is read, never into an unlinked inode or
// yesterday's file.
func (a *AuditLog) reopenIfMoved() error {
	held, err := a.f.Stat()
	if err != nil {
		return err
	}
	if !held.Mode().IsRegular() {
		return nil // a device (tests use /dev/full)
	}
	there, err := os.Stat(a.path)
	if err == nil && os.SameFile(held, there) {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_ = a.f.Close()
	a.f, a.torn = f, false
	return nil
}

// recentWindow is how much of the file's end Recent reads: the audit page
// never scans a trail of months.
const recentWindow = 4 << 20

// Recent returns the last n entries, newest first, from the file's last
// few MiB. It takes no lock an action needs: an audit page never holds an
// action up.
func (a *AuditLog) Recent(n int) ([]AuditEntry, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var r io.Reader = f
	if st.Size() > recentWindow {
		if _, err := f.Seek(st.Size()-recentWindow, io.SeekStart); err != nil {
			return nil, err
		}
		br := bufio.NewReader(f)
		if _, err := br.ReadString('\n'); err != nil { // the first line is cut
			return nil, err
		}
		r = br
	}
	return lastEntries(r, n)
}

func lastEntries(r io.Reader, n int) ([]AuditEntry, error) {
	ring := make([]AuditEntry, n) // the last n, ring[seen%n] next
	seen := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e AuditEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		ring[seen%n] = e
		seen++
	}
	out := make([]AuditEntry, 0, min(seen, n))
	for i := seen - 1; i >= 0 && i >= seen-n; i-- {
		out = append(out, ring[i%n])
	}
	return out, sc.Err()
}

// Close closes the file.
func (a *AuditLog) Close() error { return a.f.Close() }
