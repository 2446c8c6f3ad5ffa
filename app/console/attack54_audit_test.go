package console_test

import (
	"net/url"
	"os"
	"strings"
	"testing"
)

// The audit trail names what an action acted on. An id in the query
// string (POST /charge/reopen?id=A, the form naming none, or another)
// is not what the action takes (it reads the form's body): the audit
// line must not name it either.
func TestAttack54ConsoleTheAuditNamesWhatTheActionTook(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	csrf := csrfOf(t, page)
	as(t, "olga", "POST", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), url.Values{"csrf": {csrf}, "reason": {"INC-Q"}})
	as(t, "olga", "POST", srv.URL+"/dlq/redrive?id="+url.QueryEscape(w.dlqIDs(t)[w.failed]), url.Values{"csrf": {csrf}})
	b, err := os.ReadFile(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"result":"requested"`) && (strings.Contains(line, w.failed) || strings.Contains(line, w.dlqIDs(t)[w.failed])) {
			t.Fatalf("the audit trail names a charge the action did not take (the query's id, not the form's):\n%s", line)
		}
	}
}
