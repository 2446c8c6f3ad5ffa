// Package sqlitetest opens a test's own SQLite file, closed when the test
// ends.
package sqlitetest

import (
	"path/filepath"
	"testing"

	"github.com/finedge/idempotent-consumer/sqlite"
)

// Open opens a fresh SQLite file, name in the test's temporary folder,
// with opts; it is closed when the test ends.
func Open(t testing.TB, name string, opts sqlite.OpenOptions) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), name), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
