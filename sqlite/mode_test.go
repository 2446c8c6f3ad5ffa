package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/sqlite"
)

// The database holds account numbers: it and its side files are for their
// owner only, whether the file is new or was found open to others.
func TestTheDatabaseAndItsSideFilesAreOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	found := filepath.Join(dir, "found.db")
	if err := os.WriteFile(found, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(found, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "new.db"), found} {
		db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if _, err := sqlite.NewStore(db).Claim(t.Context(), driver.ClaimRequest{Key: "K", Token: "t", Fingerprint: "f", Now: now,
			LeaseExpiredBy: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(f)
			if err != nil {
				t.Errorf("%s: %v (the database runs in WAL mode: the side files exist while it is open)", filepath.Base(f), err)
				continue
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s is %v, want -rw-------", filepath.Base(f), fi.Mode().Perm())
			}
		}
		db.Close()
	}
}
