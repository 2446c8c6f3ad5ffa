package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
)

// A proposal's sample shows each charge's record "as it stands now" with
// what happens next. A reopened charge whose message waits on the DLQ
// (what a proposed redrive is for) must not be said to be reclaimed by
// "the next delivery": none comes until the redrive runs.
func TestAttack54ConsoleAProposalsSampleSaysWhenAMessageWaitsOnTheDLQ(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-SAMPLE-1")
	srv := w.consoleWith(t, console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}, func(o *console.Options) {
		w.withBook(t, "bulk>0")(o)
		o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	})
	_, form := as(t, "olga", "GET", srv.URL+"/proposals", nil)
	code, body := as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {csrfOf(t, form)}, "kind": {"redrive"},
		"charge_id": {"CHG-SAMPLE-1"}, "reason": {"INC-8: deliver the reopened charge"}})
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	_, page := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
	row := rowOf(page, "CHG-SAMPLE-1")
	if strings.Contains(row, "the next delivery reclaims it") {
		t.Fatalf("the sample promises a delivery that will not come until the proposal runs:\n%s", row)
	}
	mustContain(t, "the sample's row", row, "its message is on the DLQ")
}
