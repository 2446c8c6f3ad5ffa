// Package secretfile is the one rule for files that hold a secret (a
// private key, a client secret, a header file with an API key, the
// console's token file): nobody but their owner may read them — PostgreSQL's
// rule for a client key. A file owned by this process's user must be
// owner-only (0600 or 0400); a file owned by root may also be readable by
// its group (0640 or 0440: how Kubernetes mounts a secret for a non-root
// container with fsGroup). Anything more open is refused with the command
// that fixes it. It imports only the standard library.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrOpen is the error of a secret file that others can read or write.
var ErrOpen = errors.New("readable or writable by others")

// CheckMode says what is wrong with a secret file whose mode is mode and
// whose owner is root or not (nil when nobody but its owner, and for
// root's file its group, may read it).
func CheckMode(path string, mode fs.FileMode, rootOwned bool) error {
	allowed := fs.FileMode(0o700)
	if rootOwned {
		allowed = 0o740
	}
	if mode.Perm()&^allowed != 0 {
		return fmt.Errorf("%s is %w (mode %04o): make it owner-only with: chmod 600 %s", path, ErrOpen, mode.Perm(), path)
	}
	return nil
}

// Check stats path (following a symbolic link, as a mounted secret is
// one) and refuses it unless only its owner may read it.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	root := false
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if euid := os.Geteuid(); int(sys.Uid) != euid && sys.Uid != 0 {
			return fmt.Errorf("%s is owned by uid %d, not by this process's user (%d) nor root: whoever owns it can read and rewrite the secret (chown it)", path, sys.Uid, euid)
		}
		root = sys.Uid == 0 && os.Geteuid() != 0
	}
	return CheckMode(path, st.Mode(), root)
}

// Read reads a secret file after checking its mode.
func Read(path string) ([]byte, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// ReadOwn reads a person's own secret (an operator's key, which names her
// and signs in her name): the file must be owned by this process's user
// and owner-only — never root's file that its group reads, which every
// member of the group could use as hers. The file is checked as opened.
func ReadOwn(path string) ([]byte, error) {
	return ReadChecked(path, func(st fs.FileInfo) error {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			if euid := os.Geteuid(); int(sys.Uid) != euid {
				return fmt.Errorf("%s is owned by uid %d, not by this process's user (%d): a key of yours is a file of yours alone (chown it, chmod 600 it)", path, sys.Uid, euid)
			}
		}
		return CheckMode(path, st.Mode(), false)
	})
}

// ReadChecked reads the file at path after check accepts it as opened
// (its owner and mode read from the open file, not from the path, which
// could be swapped between a check and the read).
func ReadChecked(path string, check func(fs.FileInfo) error) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := check(st); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// Stamp identifies a version of a file for re-reading it when it changed:
// modification time, size and mode, and — where the system has them — the
// inode and the status-change time, so that a same-size edit that kept the
// modification time (cp -p, rsync -t, touch -r) or a rename over it is
// still seen.
func Stamp(st fs.FileInfo) string {
	s := fmt.Sprintf("%d/%d/%o", st.ModTime().UnixNano(), st.Size(), st.Mode().Perm())
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s += fmt.Sprintf("/%d/%d/%d.%d", sys.Dev, sys.Ino, sys.Ctim.Sec, sys.Ctim.Nsec)
	}
	return s
}

// Write writes b to path owner-only (0600), whole by rename: a reader
// never sees half of it, and a crash leaves the old file or the new one.
func Write(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing there
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
