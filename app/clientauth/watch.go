package clientauth

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// watched is a value parsed from a file (and any companion files), read
// again when one of them changes on disk, at most once a second.
type watched[T any] struct {
	files []string
	parse func([]byte) (T, error)
	// secret: the first file must be owner-only (secretfile), checked at
	// every read.
	secret bool

	mu      sync.Mutex
	stamp   string // the files' stamps (secretfile.Stamp) when last read
	checked time.Time
	val     T
	good    bool  // val holds a good value
	err     error // why the files on disk now cannot be used (nil: val is theirs)
}

func watch[T any](file string, parse func([]byte) (T, error), companions ...string) (*watched[T], error) {
	w := &watched[T]{files: append([]string{file}, companions...), parse: parse}
	if _, err := w.get(); err != nil {
		return nil, err
	}
	return w, nil
}

// watchSecret is watch for a file holding a secret: refused unless it is
// owner-only, now and at every later read.
func watchSecret[T any](file string, parse func([]byte) (T, error)) (*watched[T], error) {
	w := &watched[T]{files: []string{file}, parse: parse, secret: true}
	if _, err := w.get(); err != nil {
		return nil, err
	}
	return w, nil
}

// version is the stamp of what get last returned (it changes when the
// file did and was read again).
func (w *watched[T]) version() string {
	_, _ = w.get()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stamp
}

// get returns the value as the files are now, read again at most once a
// second when one of them changed. A file that is missing, open to others
// or does not parse keeps the last good value in use (a rotation half
// done must not stop the debits) — and problem reports it, for /readyz —
// or is an error when there never was a good one.
func (w *watched[T]) get() (T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < time.Second && w.good {
		return w.val, nil
	}
	w.checked = time.Now()
	stamp := ""
	for _, f := range w.files {
		st, err := os.Stat(f)
		if err != nil {
			// Forget the stamp: the same file put back (mv away and back,
			// cp -p) is read again.
			w.stamp, w.err = "", fmt.Errorf("%s: %w", f, err)
			return w.current()
		}
		stamp += secretfile.Stamp(st) + ";"
	}
	if stamp == w.stamp {
		return w.current()
	}
	w.stamp = stamp
	read := os.ReadFile
	if w.secret {
		read = secretfile.Read
	}
	b, err := read(w.files[0])
	if err == nil {
		var v T
		if v, err = w.parse(b); err == nil {
			w.val, w.err, w.good = v, nil, true
			return v, nil
		}
	}
	w.err = fmt.Errorf("%s: %w", w.files[0], err)
	return w.current()
}

// current is the last good value while there is one, else the error.
func (w *watched[T]) current() (T, error) {
	if w.good {
		return w.val, nil
	}
	var zero T
	return zero, w.err
}

// problem is why the files as they are on disk now cannot be used (nil
// when they can), also while the last good value is still in use.
func (w *watched[T]) problem() error {
	_, _ = w.get()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil && w.good {
		return fmt.Errorf("%w (the last good version is still in use until it is fixed)", w.err)
	}
	return w.err
}
