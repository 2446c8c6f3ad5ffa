package console_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
)

// The console never redrives an entry older than the records' retention
// less a day (the command line's redrive --force decides). The Stuck and
// DLQ pages must not offer that redrive, nor say what it would do, as if
// the console would move it: the click ends in "Held back".
func TestAttack54ConsoleAnEntryTooOldForTheConsoleIsNotOfferedItsRedrive(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-OLD-1")
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.Retention = 48 * time.Hour
		o.Now = func() time.Time { return time.Now().Add(30 * time.Hour) }
	})
	entry := w.dlqIDs(t)["CHG-OLD-1"]
	_, stuck := as(t, "olga", "GET", srv.URL+"/stuck", nil)
	_, dlq := as(t, "olga", "GET", srv.URL+"/dlq", nil)
	for what, page := range map[string]string{"the Stuck page": stuck, "the DLQ page": dlq} {
		if strings.Contains(page, `href="/dlq/redrive?id=`+url.QueryEscape(entry)+`"`) {
			t.Fatalf("%s offers the console's redrive of an entry it holds back:\n%s", what, rowOf(page, "CHG-OLD-1"))
		}
		mustContain(t, what, rowOf(page, "CHG-OLD-1"), "older than the retention less a day", "redrive --force")
	}
}
