//go:build !sqlite_cgo

package sqlite

import (
	"errors"
	"fmt"
	"net/url"

	"modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// The driver: modernc.org/sqlite, pure Go (the default; build with
// -tags sqlite_cgo for the cgo driver, see BENCHMARKS.md).
const driverName = "sqlite"

// Driver names the SQLite driver built in.
const Driver = "modernc.org/sqlite (pure Go)"

func dsn(path string, opts OpenOptions) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+string(opts.Sync)+")")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// isBusy reports SQLITE_BUSY (any extended code): another connection holds
// the write lock.
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == 5
}
