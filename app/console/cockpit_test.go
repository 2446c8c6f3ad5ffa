package console_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// The month-end columns: every page that lists charges shows, per charge,
// the decline code or reason, the amount, the masked account, the
// generation and what happens next with its action.

// summarised claims id as the charge service does (the record keeps the
// charge's summary in clear: "4200 INR 7890") and returns the claim.
func (w *world) summarised(t *testing.T, id string, minor int64) idempotency.Claim {
	t.Helper()
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := g.ClaimRequest(id, "fp")
	if err != nil {
		t.Fatal(err)
	}
	req.Summary = charge.Summary{Amount: charge.Money{Minor: minor, Currency: "INR"}, Last4: account[len(account)-4:]}.String()
	res, err := w.store.Claim(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return idempotency.ClaimOf(req, res)
}

// declinedOnTheDLQ is a charge the bank declined (FAILED, its summary
// kept) whose message is on the DLQ.
func (w *world) declinedOnTheDLQ(t *testing.T, id, code string, minor int64) {
	t.Helper()
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl := w.summarised(t, id, minor)
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "debit declined: "+code); err != nil {
		t.Fatal(err)
	}
	body, err := charge.MarshalEvent(charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: minor, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, body, queue.Reason{Code: chargehandler.Code(charge.DebitFailed), Detail: "debit declined: " + code})
}

// rowOf is the table row of charge id in page ("" when none).
func rowOf(page, id string) string {
	for _, row := range strings.Split(page, "<tr") {
		if strings.Contains(row, ">"+html.EscapeString(id)+"<") {
			return html.UnescapeString(textOf(row))
		}
	}
	return ""
}

func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, x := range want {
		if !strings.Contains(s, x) {
			t.Fatalf("%s: no %q in\n%s", what, x, s)
		}
	}
}

func TestTheRecordsPageShowsTheMonthEndColumns(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-MONTH-1", "INSUFFICIENT_FUNDS", 4200)
	w.declinedOnTheDLQ(t, "CHG-MONTH-2", "ACCOUNT_CLOSED", 990)
	srv := w.console(t, proxyAuth())

	_, page := as(t, "olga", "GET", srv.URL+"/records?state=FAILED", nil)
	mustContain(t, "the FAILED records' header", page, "<th>decline / reason</th>", "<th>amount</th>", "<th>account</th>", "<th>generation</th>", "<th>what happens next</th>")
	row := rowOf(page, "CHG-MONTH-1")
	mustContain(t, "a declined charge", row, "INSUFFICIENT_FUNDS", "INR 42.00", "****7890", "reopens it with a new attempt", "Reopen…")
	if strings.Contains(row, "not held: the record is final") {
		t.Fatalf("the lease of a final record is still the news:\n%s", row)
	}
	mustContain(t, "the Reopen action", page, `href="/charge/reopen?id=CHG-MONTH-1"`)
	mustContain(t, "a hard decline", rowOf(page, "CHG-MONTH-2"), "ACCOUNT_CLOSED (hard decline:", "INR 9.90", "never presented again")
	if strings.Contains(rowOf(page, "CHG-MONTH-2"), "Reopen…") {
		t.Fatal("a hard decline is offered a reopen")
	}
	// A record written before summaries keeps no amount: "—".
	mustContain(t, "a record without a summary", rowOf(page, w.failed), "ACCOUNT_FROZEN", "—")
	if strings.Contains(page, account) {
		t.Fatal("an account number in clear")
	}
	// A viewer reads the same columns and gets no action.
	_, viewer := as(t, "vera", "GET", srv.URL+"/records?state=FAILED", nil)
	if !strings.Contains(viewer, "INR 42.00") || strings.Contains(viewer, `href="/charge/reopen`) {
		t.Fatalf("a viewer's records page:\n%s", viewer)
	}

	// A missed notice: the amount and account from the notice the record
	// keeps (written before summaries).
	_, notes := as(t, "olga", "GET", srv.URL+"/records?state=DEBITED_NOTIFICATION_FAILED", nil)
	mustContain(t, "a missed notice", rowOf(notes, "CHG-NOTE-1"), "INR 31.00", "****7890", "notice was not sent", "missed notice is sent again")
}

// reopenedOnTheDLQ is a declined charge, its message on the DLQ, reopened
// with a new attempt by an operator who did not redrive it: IN_PROGRESS,
// its lease expired, and no delivery coming.
func (w *world) reopenedOnTheDLQ(t *testing.T, id string) {
	t.Helper()
	w.declinedOnTheDLQ(t, id, "INSUFFICIENT_FUNDS", 2500)
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, id, "INC-9: customer paid in", true, "olga"); err != nil {
		t.Fatal(err)
	}
}

// abandoned is a claim whose worker died (IN_PROGRESS, its lease running
// out), its message back on the queue.
func (w *world) abandoned(t *testing.T, id string) {
	t.Helper()
	w.summarised(t, id, 700)
}

var redriveLinkRE = regexp.MustCompile(`href="/dlq/redrive\?id=([^"]+)"`)

func TestTheStuckPageSaysWhenAMessageWaitsOnTheDLQ(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-REOPENED-1")
	w.abandoned(t, "CHG-ABANDONED-1")
	later := func(o *console.Options) { o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }
	srv := w.consoleWith(t, proxyAuth(), later)

	_, page := as(t, "olga", "GET", srv.URL+"/stuck", nil)
	mustContain(t, "the Stuck page's header", page, "<th>decline / reason</th>", "<th>amount</th>", "<th>account</th>", "<th>generation</th>", "<th>what happens next</th>")
	row := rowOf(page, "CHG-REOPENED-1")
	mustContain(t, "a reopened charge whose message is on the DLQ", row,
		"its message is on the DLQ: no delivery comes until it is redriven", "reopened: INC-9: customer paid in", "INSUFFICIENT_FUNDS", "INR 25.00", "****7890", "Redrive…")
	if strings.Contains(row, "the next delivery reclaims it") {
		t.Fatalf("the Stuck page promises a delivery that will not come:\n%s", row)
	}
	if gen := regexp.MustCompile(`generation">(\d+)<`).FindAllStringSubmatch(page, -1); len(gen) == 0 {
		t.Fatalf("no generation:\n%s", page)
	}
	// The redrive is the DLQ's own: its confirmation page, which posts
	// with the session's CSRF token (a link never moves money).
	m := redriveLinkRE.FindStringSubmatch(page)
	if m == nil || m[1] != url.QueryEscape(w.dlqIDs(t)["CHG-REOPENED-1"]) {
		t.Fatalf("no redrive of the charge's DLQ entry (%v):\n%s", m, page)
	}
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+m[1], nil)
	mustContain(t, "the redrive's confirmation", confirm, `action="/dlq/redrive"`, `name="csrf"`, "INR 25.00 from account ********7890", "debited under bank key")

	// A claim whose message is not on the DLQ: its next delivery comes.
	mustContain(t, "an abandoned claim", rowOf(page, "CHG-ABANDONED-1"), "the next delivery reclaims it", "INR 7.00", "being debited")
	if strings.Contains(rowOf(page, "CHG-ABANDONED-1"), "Redrive") {
		t.Fatal("a redrive offered for a charge with no DLQ entry")
	}
	if strings.Contains(page, account) {
		t.Fatal("an account number in clear")
	}
	// The records page of IN_PROGRESS says the same.
	_, recs := as(t, "olga", "GET", srv.URL+"/records?state=IN_PROGRESS", nil)
	mustContain(t, "IN_PROGRESS records", rowOf(recs, "CHG-REOPENED-1"), "its message is on the DLQ: no delivery comes until it is redriven")
}

// brokenDLQ is a queue whose DLQ cannot be read.
type brokenDLQ struct{ queue.Operator }

func (brokenDLQ) Redrive(context.Context, queue.RedriveOptions) (queue.RedriveReport, error) {
	return queue.RedriveReport{}, errors.New("the DLQ did not answer")
}

func TestTheStuckPageSaysWhenItCouldNotLookInTheDLQ(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-REOPENED-1")
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.Queue = brokenDLQ{o.Queue}
		o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	})
	code, page := as(t, "olga", "GET", srv.URL+"/stuck", nil)
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, page)
	}
	mustContain(t, "the Stuck page without the DLQ", page, `id="dlq-problem"`, "the DLQ could not be read")
	mustContain(t, "the reopened charge", rowOf(page, "CHG-REOPENED-1"), "if its message is on the queue (the DLQ could not all be read)")
}

func TestTheDLQPageShowsGenerationAndWhatHappensNext(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-REOPENED-1")
	w.declinedOnTheDLQ(t, "CHG-MONTH-1", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/dlq", nil)
	mustContain(t, "the DLQ's header", page, "<th>decline / reason</th>", "<th>generation</th>", "<th>what happens next</th>")
	mustContain(t, "a reopened charge on the DLQ", rowOf(page, "CHG-REOPENED-1"), "no delivery comes until it is redriven", "bank key", "INSUFFICIENT_FUNDS", "INR 25.00", "Redrive…")
	mustContain(t, "a declined charge on the DLQ", rowOf(page, "CHG-MONTH-1"), "INSUFFICIENT_FUNDS", "INR 42.00", "reopens it with a new attempt", "Reopen…")
	mustContain(t, "a conflict", rowOf(page, "CHG-CONFLICT"), "decide with the producer")
	if !regexp.MustCompile(`data-charge="CHG-REOPENED-1"[^\n]*generation">2<`).MatchString(strings.ReplaceAll(page, "\n  ", "")) {
		t.Fatalf("the reopened charge's generation (2, a new attempt) is not shown:\n%s", page)
	}
}

func TestAProposalsSampleLinksItsChargesAndShowsTheirRecords(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-MONTH-1", "INSUFFICIENT_FUNDS", 4200)
	srv := w.consoleWith(t, console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}, w.withBook(t, "reopen-new-attempt"))
	_, form := as(t, "olga", "GET", srv.URL+"/proposals", nil)
	// One labelled field a row; each checkbox with its own label.
	mustContain(t, "the propose form", form, `<label class="check" for="p-new-attempt"><input type="checkbox" name="new_attempt" id="p-new-attempt"> <span>reopen: with a new attempt`)
	code, body := as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {csrfOf(t, form)}, "kind": {"reopen"}, "new_attempt": {"on"},
		"charge_id": {"CHG-MONTH-1"}, "reason": {"INC-12: customer paid in"}})
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	_, page := as(t, "olga", "GET", srv.URL+"/proposals/show?id="+id, nil)
	mustContain(t, "the proposal", page, `<a href="/charge?id=CHG-MONTH-1">CHG-MONTH-1</a>`, `id="money"`, "debited again under its next bank key")
	mustContain(t, "the sample's row", rowOf(page, "CHG-MONTH-1"), "INSUFFICIENT_FUNDS", "INR 42.00", "****7890", "FAILED — nothing until an operator reopens it")
	if strings.Contains(page, account) {
		t.Fatal("an account number in clear")
	}
}

func TestTheReopenConfirmationSpellsOutTheMoney(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-MONTH-1", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id=CHG-MONTH-1", nil)
	mustContain(t, "the reopen confirmation", strings.Join(strings.Fields(html.UnescapeString(textOf(page))), " "), "debited INR 42.00 from account ****7890",
		"with new attempt ticked, under the next bank key", "unticked, under the same bank key")
}

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

// A stuck reopened charge with two DLQ entries: an older conflict (the
// charge id reused with another payload, which the console never
// redrives) and its own message. The Stuck page must offer the redrive of
// the entry that delivers it, not the conflict.
func TestAttack54ConsoleStuckRedrivesTheEntryThatDeliversTheCharge(t *testing.T) {
	w := newWorld(t)
	other, err := charge.MarshalEvent(charge.Charge{ID: "CHG-TWICE-1", AccountID: account, Amount: charge.Money{Minor: 99900, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, other, queue.Reason{Code: chargehandler.Code(charge.Conflict), Detail: "another payload"})
	w.deadLetter(t, []byte(`{"chargeId":"CHG-TWICE-1","garbage":true}`), queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: "not an event"})
	time.Sleep(2 * time.Millisecond)
	w.reopenedOnTheDLQ(t, "CHG-TWICE-1")
	var own string
	if _, err := w.q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Force: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) {
		if e.Reason.Code == chargehandler.Code(charge.DebitFailed) && chargeIDIn(string(e.Body)) == "CHG-TWICE-1" {
			own = e.ID
		}
	}}); err != nil {
		t.Fatal(err)
	}
	later := func(o *console.Options) { o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }
	srv := w.consoleWith(t, proxyAuth(), later)
	for _, path := range []string{"/stuck", "/records?state=IN_PROGRESS"} {
		_, page := as(t, "olga", "GET", srv.URL+path, nil)
		row := rowOf(page, "CHG-TWICE-1")
		mustContain(t, path, row, "its message is on the DLQ")
		m := redriveLinkRE.FindStringSubmatch(page)
		if m == nil || m[1] != url.QueryEscape(own) {
			t.Fatalf("%s: the redrive offered is not of the charge's own message %q (a conflict or a garbled entry is never redriven by the console): %v\n%s", path, own, m, row)
		}
	}
}

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

// A reopened charge a consumer holds right now (its lease live: a copy
// of its message was delivered) must not be said, on the DLQ page or the
// redrive's confirmation, to get "no delivery until it is redriven".
func TestAttack54ConsoleAHeldClaimIsNotSaidToWaitForARedrive(t *testing.T) {
	w := newWorld(t)
	w.reopenedOnTheDLQ(t, "CHG-HELD-1")
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(t.Context(), "CHG-HELD-1", "fp"); err != nil {
		t.Fatal(err)
	}
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/dlq", nil)
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(w.dlqIDs(t)["CHG-HELD-1"]), nil)
	for what, s := range map[string]string{"the DLQ row": rowOf(page, "CHG-HELD-1"), "the confirmation": textOf(confirm)} {
		if strings.Contains(s, "no delivery comes until it is redriven") {
			t.Fatalf("%s says no delivery comes while a consumer holds the charge:\n%s", what, s)
		}
		mustContain(t, what, s, "a consumer holds it")
	}
}

// hugeDLQ is a queue whose DLQ holds n entries, made as they are visited
// (the queue itself keeps none), noting the heap the reader holds once it
// has seen them all.
type hugeDLQ struct {
	queue.Operator
	n        int
	body     []byte
	heldPeak atomic.Uint64
}

func (q *hugeDLQ) Redrive(ctx context.Context, o queue.RedriveOptions) (queue.RedriveReport, error) {
	if !o.DryRun {
		return q.Operator.Redrive(ctx, o)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	at := time.Now().Add(-time.Hour)
	for i := range q.n {
		e := queue.DLQEntry{ID: fmt.Sprintf("m-%08d", i), Reason: queue.Reason{Code: "debit_failed", Detail: "debit declined: INSUFFICIENT_FUNDS"},
			At: at.Add(time.Duration(i) * time.Millisecond), Body: q.body, SourceID: fmt.Sprintf("s-%08d", i), ReceiveCount: 1}
		if o.Match != nil && !o.Match(e) {
			continue
		}
		if o.Visit != nil {
			o.Visit(e, queue.Move)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	for after.HeapAlloc > before.HeapAlloc {
		old := q.heldPeak.Load()
		if held := after.HeapAlloc - before.HeapAlloc; held <= old || q.heldPeak.CompareAndSwap(old, held) {
			break
		}
	}
	return queue.RedriveReport{DryRun: true, Seen: q.n}, nil
}

// The DLQ page shows the oldest 500 entries; on a huge DLQ (a month-end
// outage dead-letters everything) it must not hold every entry in memory
// to show 500: any viewer's reload would take the console's memory with it.
func TestAttack54ConsoleAHugeDLQIsNotHeldWholeToShowAPage(t *testing.T) {
	w := newWorld(t)
	body, err := charge.MarshalEvent(charge.Charge{ID: "CHG-HUGE-1", AccountID: account, Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60_000
	q := &hugeDLQ{Operator: w.q, n: n, body: body}
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) { o.Queue = q; o.Refresh = time.Hour })
	code, page := as(t, "vera", "GET", srv.URL+"/dlq", nil)
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, page)
	}
	mustContain(t, "the DLQ page", page, fmt.Sprintf("%d entries, oldest first (the oldest 500 shown", n))
	if rows := strings.Count(page, `<tr data-charge=`); rows != 500 {
		t.Fatalf("%d rows shown, want the oldest 500", rows)
	}
	mustContain(t, "the oldest first", page, `/dlq/entry?id=m-00000000"`)
	if held := q.heldPeak.Load(); held > 8<<20 {
		t.Fatalf("the DLQ page held %d MiB for %d entries to show 500", held>>20, n)
	}
}

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

// An operator's reopen reason is free text: one that names the customer's
// account must not show it in clear on the Stuck and Records pages (the
// "decline / reason" column), the charge page, nor a proposal's "why".
func TestAttack54ConsoleReasonsNamingAnAccountAreMasked(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-MASK-1", "INSUFFICIENT_FUNDS", 4200)
	w.declinedOnTheDLQ(t, "CHG-MASK-2", "INSUFFICIENT_FUNDS", 4300)
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, "CHG-MASK-1", "INC-5: customer paid into "+account+" on the 30th", true, "olga (cli)"); err != nil {
		t.Fatal(err)
	}
	srv := w.consoleWith(t, console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}, func(o *console.Options) {
		w.withBook(t, "reopen-new-attempt")(o)
		o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	})
	_, form := as(t, "olga", "GET", srv.URL+"/proposals", nil)
	code, body := as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {csrfOf(t, form)}, "kind": {"reopen"}, "new_attempt": {"on"},
		"charge_id": {"CHG-MASK-2"}, "reason": {"INC-6: paid into " + account}})
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	for _, path := range []string{"/stuck", "/records?state=IN_PROGRESS", "/charge?id=CHG-MASK-1", "/proposals", "/proposals/show?id=" + id} {
		_, page := as(t, "ivan", "GET", srv.URL+path, nil)
		if strings.Contains(page, account) {
			i := strings.Index(page, account)
			t.Fatalf("%s shows the account in clear: …%s…", path, page[max(0, i-200):min(len(page), i+50)])
		}
	}
}

// scanningStore is a store whose stuck claims and IN_PROGRESS listing are
// a Scan of a table too big to read in a page's time (DynamoDB's: 60
// million records take minutes): each call reads until its context ends.
type scanningStore struct {
	*memstore.Store
	stopped atomic.Int32 // calls whose context ended (the Scan stopped)
}

func (s *scanningStore) Stuck(ctx context.Context, _ time.Time, _ int) ([]driver.Record, int, error) {
	<-ctx.Done()
	s.stopped.Add(1)
	return nil, 0, driver.Unavailable("scan", ctx.Err())
}

func (s *scanningStore) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	if req.State != driver.StateInProgress {
		return s.Store.ListState(ctx, req)
	}
	<-ctx.Done()
	s.stopped.Add(1)
	return driver.ListPage{}, driver.Unavailable("scan", ctx.Err())
}

// Review 52: on DynamoDB the Stuck page and the IN_PROGRESS records page
// are a Scan of the whole table, minutes on a large one, inside a request
// the console's server gives up writing after 30s (WriteTimeout): the
// page never came, and the Scan ran on to its end (millions of read
// units) after the browser had gone, once more at every reload. The
// console waits ScanWait for them, then stops the read and says to run
// chargerecovery stuck.
func TestAttack52DynamoTheStuckPageStopsAScanThatCannotAnswerInTime(t *testing.T) {
	w := newWorld(t)
	st := &scanningStore{Store: w.store}
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.Store = st
		o.ScanWait = 200 * time.Millisecond
	})
	for _, path := range []string{"/stuck", "/records?state=IN_PROGRESS"} {
		done := make(chan struct{})
		var code int
		var body string
		go func() {
			defer close(done)
			code, body = as(t, "vera", http.MethodGet, srv.URL+path, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("GET %s: no answer after 10s (the Scan still reading)", path)
		}
		if code != http.StatusGatewayTimeout || !strings.Contains(body, "chargerecovery stuck") {
			t.Errorf("GET %s = %d %q, want 504 naming chargerecovery stuck", path, code, body)
		}
	}
	if got := st.stopped.Load(); got != 2 {
		t.Errorf("%d reads stopped, want 2", got)
	}
}

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

// While the consumer reports its posting window closed, the overview says
// so, and the page of a charge not yet debited says it waits for the
// window; a charge already debited does not.
func TestTheConsoleSaysAChargeWaitsForThePostingWindow(t *testing.T) {
	w := newWorld(t)
	m := metrics.New()
	m.PostingWindow(func() (bool, time.Time) { return false, time.Date(2026, 12, 4, 3, 30, 0, 0, time.UTC) })
	ms := httptest.NewServer(m.Handler())
	defer ms.Close()
	// A charge waiting for its retry.
	if _, err := w.store.Claim(t.Context(), driver.ClaimRequest{Key: "CHG-WAIT-1", Token: "t1", Fingerprint: "fp", Now: time.Now(),
		LeaseExpiredBy: time.Now(), LeaseUntil: time.Now().Add(time.Minute), ExpiresAt: time.Now().Add(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := w.store.Finish(t.Context(), driver.FinishRequest{Key: "CHG-WAIT-1", Token: "t1", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
		Detail: "next attempt at 2026-12-04T03:30:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)", Now: time.Now(),
		NotBefore: time.Now().Add(time.Hour), ExpiresAt: time.Now().Add(48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) { o.MetricsURL = ms.URL })
	// In this order: the charge's page says what the overview's last
	// sample of the consumer said (a map's order made it fail one run in two).
	for _, tc := range []struct{ path, want string }{
		{"/", "outside posting window until 2026-12-04T03:30:00Z"},
		{"/charge?id=CHG-WAIT-1", "waiting for the posting window: outside posting window until 2026-12-04T03:30:00Z"},
	} {
		path, want := tc.path, tc.want
		code, body := as(t, "vera", "GET", srv.URL+path, nil)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", path, code, want, body)
		}
	}
	if _, body := as(t, "vera", "GET", srv.URL+"/charge?id=CHG-DONE-1", nil); strings.Contains(body, "waiting for the posting window") {
		t.Error("a debited charge's page says it waits for the posting window")
	}
	if _, body := as(t, "vera", "GET", srv.URL+"/charge?id=CHG-WAIT-1", nil); !strings.Contains(body, "attempt 2 of 4, after INSUFFICIENT_FUNDS") {
		t.Errorf("the waiting charge's schedule is not shown:\n%s", body)
	}
}
