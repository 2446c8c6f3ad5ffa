//go:build sqlite_cgo

package sqlite

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/mattn/go-sqlite3" // the cgo SQLite driver, registered as "sqlite3"
)

// The driver: github.com/mattn/go-sqlite3 (cgo), chosen with -tags sqlite_cgo.
const driverName = "sqlite3"

// Driver names the SQLite driver built in.
const Driver = "github.com/mattn/go-sqlite3 (cgo)"

func dsn(path string, opts OpenOptions) string {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", fmt.Sprint(opts.BusyTimeout.Milliseconds()))
	q.Set("_synchronous", string(opts.Sync))
	q.Set("_foreign_keys", "on")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// isBusy reports SQLITE_BUSY (any extended code): another connection holds
// the write lock.
func isBusy(err error) bool {
	var e sqlite3.Error
	return errors.As(err, &e) && e.Code == sqlite3.ErrBusy
}
