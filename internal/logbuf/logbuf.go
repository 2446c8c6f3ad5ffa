// Package logbuf is a log sink for tests: written by many goroutines at
// once (handlers, a command running in a goroutine, exec's copier) while
// the test reads it whole.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer written by one writer at a time.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (n int, err error) {
	l.locked(func() { n, err = l.b.Write(p) })
	return n, err
}

// String is all that was written so far.
func (l *Buffer) String() (s string) {
	l.locked(func() { s = l.b.String() })
	return s
}

func (l *Buffer) locked(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}
