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
	stamp   string // modification times and sizes when last read
	checked time.Time
	val     T
	err     error
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

func (w *watched[T]) get() (T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < time.Second && w.stamp != "" {
		return w.val, nil
	}
	w.checked = time.Now()
	stamp := ""
	for _, f := range w.files {
		st, err := os.Stat(f)
		if err != nil {
			var zero T
			w.err = fmt.Errorf("%s: %w", f, err)
			return zero, w.err
		}
		stamp += fmt.Sprintf("%d/%d/%o;", st.ModTime().UnixNano(), st.Size(), st.Mode().Perm())
	}
	if stamp == w.stamp {
		return w.val, w.err
	}
	read := os.ReadFile
	if w.secret {
		read = secretfile.Read
	}
	b, err := read(w.files[0])
	if err == nil {
		var v T
		if v, err = w.parse(b); err == nil {
			w.val, w.err, w.stamp = v, nil, stamp
			return v, nil
		}
	}
	// Keep the last good value if there was one (a rotation half-written:
	// read again on a later call); report the error only when there is none.
	if w.stamp != "" {
		return w.val, nil
	}
	var zero T
	w.err = fmt.Errorf("%s: %w", w.files[0], err)
	return zero, w.err
}
