package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
)

var tagRE = regexp.MustCompile(`<[^>]*>`)

// visible is what a page shows its reader: its text, tags left out.
func visible(page string) string { return html.UnescapeString(tagRE.ReplaceAllString(page, " ")) }

// A charge whose id holds its account (CHG-001234567890), FAILED with its
// message on the DLQ: no page the operator walks — the DLQ, its entry,
// the redrive's confirmation and result, Stuck, Records, the charge, the
// audit trail — shows the account in its text, and the redrive still
// works. (Its links carry the id as read: the known defect
// TestAttack54MaskLinksCarryTheAccount.)
func TestAttack54MaskPagesOfAChargeWhoseIDHoldsTheAccount(t *testing.T) {
	id := "CHG-" + account
	w := newWorld(t)
	w.declinedOnTheDLQ(t, id, "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	entry := w.dlqIDs(t)[id]
	if entry == "" {
		t.Fatal("no DLQ entry")
	}
	leak := func(path, page string) {
		t.Helper()
		page = visible(page)
		if i := strings.Index(page, "1234567890"); i >= 0 {
			t.Errorf("%s shows the account: …%s…", path, page[max(0, i-200):min(len(page), i+40)])
		}
	}
	for _, path := range []string{"/charge?id=" + url.QueryEscape(id), "/dlq", "/dlq/entry?id=" + url.QueryEscape(entry), "/dlq/redrive?id=" + url.QueryEscape(entry), "/stuck", "/records", "/records?state=FAILED"} {
		code, page := as(t, "olga", "GET", srv.URL+path, nil)
		if code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
		leak(path, page)
	}
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", formOf(t, confirm, "confirm-form"))
	if code != http.StatusOK {
		t.Fatalf("redrive: %d\n%s", code, body)
	}
	leak("the redrive's result", body)
	_, page := as(t, "olga", "GET", srv.URL+"/audit", nil)
	leak("/audit", page)
}

// A stuck reopened charge whose id is shown masked (it holds the
// account): the Stuck page still finds its message on the DLQ (looked up
// by the id as read) and offers its redrive, the row showing the id
// masked.
func TestAttack54MaskStuckFindsTheDLQEntryOfAMaskedID(t *testing.T) {
	id := "CHG-" + account
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, id)
	later := func(o *console.Options) { o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }
	srv := w.consoleWith(t, proxyAuth(), later)
	_, page := as(t, "olga", "GET", srv.URL+"/stuck", nil)
	row := rowOf(page, charge.ShowID(id)) // the row shows the id masked
	mustContain(t, "/stuck", row, "its message is on the DLQ")
	if redriveLinkRE.FindStringSubmatch(page) == nil {
		t.Fatalf("no redrive offered:\n%s", row)
	}
}

// The entry page of a charge whose id is shown masked does not link to a
// charge page by the masked id (no record is under it: the link led to
// "no record"); its record is on the entry page itself.
func TestAttack54MaskEntryPageHasNoLinkByTheMaskedID(t *testing.T) {
	id := "CHG-" + account
	w := newWorld(t)
	w.declinedOnTheDLQ(t, id, "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/dlq/entry?id="+url.QueryEscape(w.dlqIDs(t)[id]), nil)
	if i := strings.Index(page, `href="/charge?id=CHG-`); i >= 0 && !strings.HasPrefix(page[i:], `href="/charge?id=`+id) {
		t.Errorf("the entry page links to the charge by its masked id")
	}
	mustContain(t, "the entry page", visible(page), charge.ShowID(id), "FAILED")
}
