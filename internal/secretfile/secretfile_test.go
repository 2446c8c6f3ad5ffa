package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

func TestOnlyOwnerOnlyFilesAreRead(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o700, true}, {0o640, false}, {0o644, false}, {0o604, false}, {0o660, false}, {0o666, false}} {
		p := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(p, []byte("s3cret-value"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		b, err := secretfile.Read(p)
		if tc.ok {
			if err != nil || string(b) != "s3cret-value" {
				t.Fatalf("mode %04o: %q, %v", tc.mode, b, err)
			}
			continue
		}
		if !errors.Is(err, secretfile.ErrOpen) || b != nil {
			t.Fatalf("mode %04o: want ErrOpen, got %q, %v", tc.mode, b, err)
		}
		if !strings.Contains(err.Error(), "chmod 600 "+p) || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("mode %04o: the error should name the fix and not the content: %v", tc.mode, err)
		}
	}
}

// Root's file may be readable by its group (a Kubernetes secret with
// fsGroup for a non-root container), never by others nor writable by the
// group; a file of one's own must be owner-only.
func TestTheModeRule(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		root bool
		ok   bool
	}{
		{0o600, false, true}, {0o400, false, true}, {0o640, false, false}, {0o440, false, false},
		{0o600, true, true}, {0o640, true, true}, {0o440, true, true}, {0o660, true, false}, {0o644, true, false}, {0o604, true, false},
	} {
		err := secretfile.CheckMode("f", tc.mode, tc.root)
		if (err == nil) != tc.ok {
			t.Errorf("mode %04o root %v: %v", tc.mode, tc.root, err)
		}
	}
}

func TestWriteIsOwnerOnlyAndWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := secretfile.Write(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" || st.Mode().Perm() != 0o600 {
		t.Fatalf("after Write: %q, mode %v; want \"new\", 0600 (a file others could read replaced, not kept)", b, st.Mode().Perm())
	}
	if err := secretfile.Write(filepath.Join(t.TempDir(), "missing", "x"), nil); err == nil {
		t.Fatal("Write into a missing directory: no error")
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

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
