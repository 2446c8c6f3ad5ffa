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
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Attack 54: the month-end cockpit (Records, Stuck, DLQ, a proposal's
// sample, the confirmation pages) attacked by a reviewer who did not
// build it.

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// formOf is every hidden field of the form with id in page.
func formOf(t *testing.T, page, id string) url.Values {
	t.Helper()
	i := strings.Index(page, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no form %s in\n%s", id, page)
	}
	form := page[i:]
	form = form[:strings.Index(form, "</form>")]
	v := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(form, -1) {
		v.Add(m[1], html.UnescapeString(m[2]))
	}
	return v
}

// declinedAgain is what a consumer does with the next delivery of a
// reopened charge the bank declines again: claims it and records FAILED.
func (w *world) declinedAgain(t *testing.T, id, code string) {
	t.Helper()
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), id, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "debit declined: "+code); err != nil {
		t.Fatal(err)
	}
}

// Held: text from outside (an unreadable DLQ body's charge id, a decline
// code, a record's summary) is escaped in text, attributes and links; a
// malformed summary shows "—" and the page renders.
func TestAttack54ConsoleEscapesWhatComesFromOutside(t *testing.T) {
	w := newWorld(t)
	evil := `javascript:alert(1)//"><img src=x onerror=alert(2)>`
	w.deadLetter(t, []byte(`{"chargeId":"`+strings.ReplaceAll(evil, `"`, `\"`)+`","accountId":"`+account+`"}`), queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: "declined: <b>X</b>"})
	w.failedWith(t, "CHG-EVIL-1", `debit declined: <script>alert(3)</script>: "><img src=x>`)
	// Summaries the claim did not write as charge.Summary does.
	for i, s := range []string{"9223372036854775807 INR 7890", "1 INR <scr", "-5 INR 7890", "1 XXX 7890", "1 INR 12345678", "<script> INR", "1  INR"} {
		g, err := idempotency.NewGuard(w.store, idempotency.Options{})
		if err != nil {
			t.Fatal(err)
		}
		req, err := g.ClaimRequest("CHG-SUM-"+string(rune('A'+i)), "fp")
		if err != nil {
			t.Fatal(err)
		}
		req.Summary = s
		res, err := w.store.Claim(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Fail(t.Context(), idempotency.ClaimOf(req, res).Lease(), "FAILED", "debit declined: X"); err != nil {
			t.Fatal(err)
		}
	}
	later := func(o *console.Options) { o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }
	srv := w.consoleWith(t, proxyAuth(), later)
	for _, path := range []string{"/dlq", "/records?state=FAILED", "/stuck", "/charge?id=CHG-EVIL-1"} {
		code, page := as(t, "olga", "GET", srv.URL+path, nil)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, code, page)
		}
		for _, bad := range []string{"<img", "<script>", "<b>X", `href="javascript:`, account} {
			if strings.Contains(page, bad) {
				t.Fatalf("%s holds %q:\n%s", path, bad, page)
			}
		}
	}
	_, page := as(t, "olga", "GET", srv.URL+"/records?state=FAILED", nil)
	mustContain(t, "a huge amount", rowOf(page, "CHG-SUM-A"), "INR 92233720368547758.07", "****7890")
	for _, id := range []string{"CHG-SUM-C", "CHG-SUM-D", "CHG-SUM-E", "CHG-SUM-F", "CHG-SUM-G"} {
		if row := rowOf(page, id); !strings.Contains(row, "—") || strings.Contains(row, "12345678") {
			t.Fatalf("a summary the claim did not write (%s) is shown:\n%s", id, row)
		}
	}
}

// Held: every action in the cockpit is a POST; its GET is a confirmation
// that moves nothing, even with the form's fields in the query.
func TestAttack54ConsoleAGetMovesNothing(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-GET-1", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	entry := w.dlqIDs(t)["CHG-GET-1"]
	_, page := as(t, "olga", "GET", srv.URL+"/dlq", nil)
	csrf := csrfOf(t, page)
	for _, u := range []string{
		"/dlq/redrive?id=" + url.QueryEscape(entry) + "&csrf=" + url.QueryEscape(csrf),
		"/charge/reopen?id=CHG-GET-1&csrf=" + url.QueryEscape(csrf) + "&reason=x&new_attempt=on",
	} {
		as(t, "olga", "GET", srv.URL+u, nil)
		as(t, "olga", "HEAD", srv.URL+u, nil)
	}
	if _, ok := w.dlqIDs(t)["CHG-GET-1"]; !ok {
		t.Fatal("a GET redrove")
	}
	if rec, _ := w.store.Get(t.Context(), "CHG-GET-1", time.Now()); rec.State != driver.StateFailed {
		t.Fatalf("a GET reopened: %s", rec.State)
	}
	// The POST from another site, or without the token, moves nothing.
	form := url.Values{"id": {entry}, "csrf": {csrf}}
	as(t, "olga", "POST", srv.URL+"/dlq/redrive", form, "Sec-Fetch-Site", "cross-site")
	as(t, "olga", "POST", srv.URL+"/dlq/redrive", form, "Origin", "https://evil.example")
	as(t, "olga", "POST", srv.URL+"/dlq/redrive", url.Values{"id": {entry}})
	if _, ok := w.dlqIDs(t)["CHG-GET-1"]; !ok {
		t.Fatal("a cross-site or token-less POST redrove")
	}
}

// Held: the proposer cannot approve her own proposal from its page, under
// her name spelt another way either.
func TestAttack54ConsoleTheProposerCannotApproveHerOwn(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-OWN-1", "INSUFFICIENT_FUNDS", 4200)
	auth := console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback, GroupsHeader: "X-Auth-Request-Groups", OperatorGroup: "ops"}
	srv := w.consoleWith(t, auth, w.withBook(t, "reopen-new-attempt"))
	_, form := as(t, "olga", "GET", srv.URL+"/proposals", nil)
	code, body := as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {csrfOf(t, form)}, "kind": {"reopen"}, "new_attempt": {"on"},
		"charge_id": {"CHG-OWN-1"}, "reason": {"INC-9"}})
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	_, page := as(t, "olga", "GET", srv.URL+"/proposals/show?id="+id, nil)
	if strings.Contains(page, `id="approve"`) || !strings.Contains(page, `id="mine"`) {
		t.Fatalf("the proposer is offered the approval:\n%s", page)
	}
	for _, who := range []string{"olga", "OLGA", " Olga"} {
		_, p := as(t, who, "GET", srv.URL+"/proposals/show?id="+id, nil, "X-Auth-Request-Groups", "ops")
		code, body := as(t, who, "POST", srv.URL+"/proposals/approve", url.Values{"csrf": {csrfOf(t, p)}, "id": {id}}, "X-Auth-Request-Groups", "ops")
		if code != http.StatusForbidden {
			t.Fatalf("%q approved olga's proposal: %d\n%s", who, code, body)
		}
	}
	if rec, _ := w.store.Get(t.Context(), "CHG-OWN-1", time.Now()); rec.State != driver.StateFailed {
		t.Fatalf("the charge was reopened: %s", rec.State)
	}
}
