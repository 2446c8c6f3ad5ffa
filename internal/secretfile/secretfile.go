// Package secretfile is the one rule for files that hold a secret (a
// private key, a client secret, a header file with an API key, the
// console's token file): they must be readable by their owner only, as
// OpenSSH requires of a private key, or they are refused with the command
// that fixes them. It imports only the standard library.
package secretfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrOpen is the error of a secret file that others can read or write.
var ErrOpen = errors.New("readable or writable by others")

// CheckMode says what is wrong with a secret file whose mode is mode
// (nil when only its owner may read or write it).
func CheckMode(path string, mode fs.FileMode) error {
	if mode.Perm()&0o077 != 0 {
		return fmt.Errorf("%s is %w (mode %04o): make it owner-only with: chmod 600 %s", path, ErrOpen, mode.Perm(), path)
	}
	return nil
}

// Check stats path (following a symbolic link, as a mounted secret is
// one) and refuses it unless it is owner-only.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return CheckMode(path, st.Mode())
}

// Read reads a secret file after checking its mode.
func Read(path string) ([]byte, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}
