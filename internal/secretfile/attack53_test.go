package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// A person's own secret (an operator's key) is read only from a file of
// hers, owner-only: 0640 is refused whoever owns it.
func TestAttack53MovedReadOwnIsOwnerOnly(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o440, false}, {0o604, false}} {
		p := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(p, []byte("k"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		b, err := secretfile.ReadOwn(p)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, secretfile.ErrOpen)) || (tc.ok && string(b) != "k") {
			t.Fatalf("mode %04o: %q, %v", tc.mode, b, err)
		}
	}
}
