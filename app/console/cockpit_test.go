package console_test

import (
	"context"
	"errors"
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
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
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
