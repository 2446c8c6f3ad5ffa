package audit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteNewKeyWritesAKeyOnceOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "operator.key")
	pub, err := WriteNewKey(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParsePrivateKey(b)
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("the file holds %v, %v; want the key of %s", key, err, PublicKeyString(pub))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %s, want 0600", fi.Mode().Perm())
	}
	for _, name := range []string{path, filepath.Join(t.TempDir(), "link")} {
		if name != path {
			if err := os.Symlink(filepath.Join(t.TempDir(), "nowhere"), name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := WriteNewKey(name); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("WriteNewKey over %s: %v, want fs.ErrExist", name, err)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(b) {
		t.Fatal("the key was replaced")
	}
}
