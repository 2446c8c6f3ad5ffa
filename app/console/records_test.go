package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
)

var (
	nextRE     = regexp.MustCompile(`<a href="([^"]+)" id="next"`)
	rowChargRE = regexp.MustCompile(`<tr><td><a href="/charge\?id=[^"]*">([^<]*)</a>`)
)

// recordsOf is the charge ids a records page lists, and its next page's URL.
func recordsOf(t *testing.T, page string) ([]string, string) {
	t.Helper()
	var ids []string
	for _, m := range rowChargRE.FindAllStringSubmatch(page, -1) {
		ids = append(ids, html.UnescapeString(m[1]))
	}
	next := ""
	if m := nextRE.FindStringSubmatch(page); m != nil {
		next = html.UnescapeString(m[1])
	}
	return ids, next
}

// failMany makes n FAILED records CHG-PAGE-00… (and a few others).
func (w *world) failMany(t *testing.T, n int) {
	t.Helper()
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c, err := g.Claim(t.Context(), fmt.Sprintf("CHG-PAGE-%02d", i), "fp")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Fail(t.Context(), c.Lease(), "FAILED", "declined"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecordsPagesBySearchAndCursor(t *testing.T) {
	w := newWorld(t)
	w.failMany(t, 12)
	srv := w.console(t, proxyAuth())
	var seen []string
	u := srv.URL + "/records?state=FAILED&q=CHG-PAGE-&limit=5"
	pages := 0
	for u != "" {
		code, page := as(t, "vera", "GET", u, nil)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", u, code, page)
		}
		ids, next := recordsOf(t, page)
		seen = append(seen, ids...)
		pages++
		if next != "" && !strings.HasPrefix(next, "/records?") {
			t.Fatalf("next page link %q", next)
		}
		if next == "" {
			u = ""
			if !strings.Contains(page, `id="last"`) {
				t.Fatal("the last page does not say so")
			}
		} else {
			u = srv.URL + next
			if !strings.Contains(page, "q=CHG-PAGE-") {
				t.Fatal("the search is lost on the next page's link")
			}
		}
	}
	if pages != 3 || len(seen) != 12 || seen[0] != "CHG-PAGE-00" || seen[11] != "CHG-PAGE-11" {
		t.Fatalf("%d pages listed %v, want 3 pages of CHG-PAGE-00…11", pages, seen)
	}
	// The other states.
	_, page := as(t, "vera", "GET", srv.URL+"/records?state=DEBITED_NOTIFICATION_FAILED", nil)
	if ids, _ := recordsOf(t, page); len(ids) != 1 || ids[0] != "CHG-NOTE-1" {
		t.Fatalf("missed notices: %v", ids)
	}
	_, page = as(t, "vera", "GET", srv.URL+"/records?state=FAILED&q="+url.QueryEscape(w.failed), nil)
	if ids, _ := recordsOf(t, page); len(ids) != 1 || ids[0] != w.failed {
		t.Fatalf("search %s: %v", w.failed, ids)
	}
	_, page = as(t, "vera", "GET", srv.URL+"/records?state=IN_PROGRESS", nil)
	if ids, _ := recordsOf(t, page); len(ids) != 0 || !strings.Contains(page, `id="records-none"`) {
		t.Fatalf("IN_PROGRESS: %v", ids)
	}
}

func TestRecordsRefusesWhatItDidNotMake(t *testing.T) {
	w := newWorld(t)
	w.failMany(t, 4)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "vera", "GET", srv.URL+"/records?state=FAILED&q=CHG-PAGE-&limit=2", nil)
	_, next := recordsOf(t, page)
	if next == "" {
		t.Fatal("no next page")
	}
	nu, _ := url.Parse(next)
	good := nu.Query().Get("after")
	payload, mac, _ := strings.Cut(good, ".")
	bad := map[string]string{
		"garbled":        "state=FAILED&q=CHG-PAGE-&after=%%%zz",
		"no signature":   "state=FAILED&q=CHG-PAGE-&after=" + payload,
		"forged":         "state=FAILED&q=CHG-PAGE-&after=eyJzIjoiRkFJTEVEIiwicSI6IkNIRy1QQUdFLSIsImsiOiJDSEctUEFHRS0wMiJ9." + mac,
		"another state":  "state=DONE&q=CHG-PAGE-&after=" + url.QueryEscape(good),
		"another search": "state=FAILED&q=CHG-&after=" + url.QueryEscape(good),
		"a plain key":    "state=FAILED&after=CHG-PAGE-01",
		"state":          "state=failed",
		"limit":          "state=FAILED&limit=-1",
		"limit text":     "state=FAILED&limit=ten",
		"control":        "state=FAILED&q=%00",
		"not text":       "state=FAILED&q=%ff",
		"a huge search":  "state=FAILED&q=" + strings.Repeat("A", 300),
		"a huge cursor":  "state=FAILED&after=" + strings.Repeat("A", 5000),
	}
	for name, q := range bad {
		code, page := as(t, "vera", "GET", srv.URL+"/records?"+q, nil)
		if code != http.StatusBadRequest || !strings.Contains(page, `<nav>`) {
			t.Errorf("%s: %d, want 400 on the console's page\n%s", name, code, page)
		}
	}
	// A huge page size is the cap.
	code, page := as(t, "vera", "GET", srv.URL+"/records?state=FAILED&limit=1000000000", nil)
	if code != http.StatusOK || !strings.Contains(page, "200 a page") {
		t.Fatalf("a huge page size: %d", code)
	}
	// A charge id with HTML in it is text on the page.
	g, _ := idempotency.NewGuard(w.store, idempotency.Options{})
	evil := `CHG-"><script>alert(1)</script><b>x`
	c, err := g.Claim(t.Context(), evil, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), c.Lease(), "FAILED", "<i>declined</i>"); err != nil {
		t.Fatal(err)
	}
	_, page = as(t, "vera", "GET", srv.URL+"/records?state=FAILED&q="+url.QueryEscape(`CHG-"><`), nil)
	if ids, _ := recordsOf(t, page); len(ids) != 1 || ids[0] != evil || strings.Contains(page, "<script>alert") || strings.Contains(page, "<b>x") {
		t.Fatalf("a charge id with HTML: %v\n%s", ids, page)
	}
	// Search characters are text: no pattern.
	for _, q := range []string{"%", "_", "*", ".*", "CHG-PAGE-0%", "CHG_PAGE"} {
		_, page := as(t, "vera", "GET", srv.URL+"/records?state=FAILED&q="+url.QueryEscape(q), nil)
		if ids, _ := recordsOf(t, page); len(ids) != 0 {
			t.Errorf("search %q listed %v", q, ids)
		}
	}
}

func TestTheConsolesNotFoundPage(t *testing.T) {
	srv := newWorld(t).console(t, proxyAuth())
	for _, u := range []string{"/nope", "/dlq/nope", "/static/nope.js", "/charge?id=CHG-NOPE"} {
		resp := getAs(t, "vera", srv.URL+u)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", u, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: CSP %q", u, csp)
		}
	}
	for _, u := range []string{"/static/nope.js", "/static/", "/static/../console.go"} {
		code, page := as(t, "vera", "GET", srv.URL+u, nil)
		if code != http.StatusNotFound || !strings.Contains(page, `id="title">Not found`) {
			t.Errorf("%s: %d\n%s", u, code, page)
		}
	}
	if code, page := as(t, "vera", "GET", srv.URL+"/static/console.css", nil); code != http.StatusOK || !strings.Contains(page, ".chart") {
		t.Errorf("the stylesheet: %d", code)
	}
	code, page := as(t, "vera", "GET", srv.URL+"/nope<b>x</b>", nil)
	if code != http.StatusNotFound || !strings.Contains(page, `<link rel="stylesheet" href="/static/console.css">`) ||
		!strings.Contains(page, `href="/"`) || strings.Contains(page, "<b>x</b>") || strings.Contains(page, "404 page not found") {
		t.Fatalf("the 404 page: %d\n%s", code, page)
	}
	code, page = as(t, "vera", "GET", srv.URL+"/charge?id="+url.QueryEscape("CHG-<script>x</script>"), nil)
	if code != http.StatusNotFound || strings.Contains(page, "<script>x") || !strings.Contains(page, `id="no-record"`) || !strings.Contains(page, `id="back"`) {
		t.Fatalf("an unknown charge: %d\n%s", code, page)
	}
	// Not signed in: the 404 page without the console's navigation.
	code, page = as(t, "", "GET", srv.URL+"/nope", nil)
	if code != http.StatusNotFound || strings.Contains(page, "<nav>") {
		t.Fatalf("anonymous 404: %d\n%s", code, page)
	}
}

// A tool's own record (the four-eyes settings the console's start keeps,
// "_settings/v00000001", DONE) is not a charge: the DONE page does not
// list it as one debited.
func TestRecordsPageLeavesOutToolRecords(t *testing.T) {
	w := newWorld(t)
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"_settings/v00000001", "CHG-2026-11-000123"} {
		c, err := g.Claim(t.Context(), key, "fp")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Complete(t.Context(), c.Lease(), "DEBITED", "CBS1"); err != nil {
			t.Fatal(err)
		}
	}
	srv := w.console(t, proxyAuth())
	_, page := as(t, "vera", "GET", srv.URL+"/records?state=DONE", nil)
	ids, _ := recordsOf(t, page)
	if !slices.Contains(ids, "CHG-2026-11-000123") || slices.Contains(ids, "_settings/v00000001") || strings.Contains(page, "_settings") {
		t.Fatalf("DONE page lists %v", ids)
	}
}
