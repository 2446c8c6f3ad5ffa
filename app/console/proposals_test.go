package console_test

import (
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	auditpkg "github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

var proposalIDRE = regexp.MustCompile(`P-[0-9a-f]{10}`)

func (w *world) withBook(t *testing.T, policy string) func(*console.Options) {
	t.Helper()
	p, err := approval.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	return func(o *console.Options) {
		b, err := approval.Open(o.Audit, approval.Options{Policy: &p})
		if err != nil {
			t.Fatal(err)
		}
		o.Approvals = b
	}
}

func TestABulkRedriveProposedInTheConsoleNeedsASecondOperator(t *testing.T) {
	w := newWorld(t)
	auth := console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}
	srv := w.consoleWith(t, auth, w.withBook(t, "reopen-new-attempt,redrive-force,bulk>0"))
	// The DLQ page, filtered, offers the bulk redrive of what it shows,
	// with the filter carried to the form.
	_, dlq := as(t, "olga", "GET", srv.URL+"/dlq?reason=debit_failed", nil)
	if !strings.Contains(dlq, `id="propose-these" href="/proposals?kind=redrive&amp;reason_code=debit_failed`) {
		t.Fatalf("the DLQ page offers no bulk redrive of what it shows:\n%s", dlq)
	}
	_, page := as(t, "olga", "GET", srv.URL+"/proposals?kind=redrive&reason_code=debit_failed", nil)
	if !strings.Contains(page, `name="reason_code" value="debit_failed"`) {
		t.Fatalf("the form does not carry the filter:\n%s", page)
	}
	if !strings.Contains(page, "reopen-new-attempt,redrive-force,bulk&gt;0") {
		t.Fatalf("the proposals page does not show the policy:\n%s", page)
	}
	olgaCSRF := csrfOf(t, page)
	code, body := as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {olgaCSRF}, "kind": {"redrive"},
		"reason_code": {"debit_failed"}, "reason": {"INC-12: bank fixed"}})
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" || !strings.Contains(body, "1 charge(s), INR 25.01 (1)") {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	_, mine := as(t, "olga", "GET", srv.URL+"/proposals/show?id="+id, nil)
	if !strings.Contains(mine, `id="mine"`) || strings.Contains(mine, `id="approve"`) || !strings.Contains(mine, w.failed) || strings.Contains(mine, account) {
		t.Fatalf("the proposer's page (an approve button, or no sample, or an account in clear):\n%s", mine)
	}
	if code, body := as(t, "olga", "POST", srv.URL+"/proposals/approve", url.Values{"csrf": {olgaCSRF}, "id": {id}}); code != http.StatusForbidden {
		t.Fatalf("the proposer approves: %d\n%s", code, body)
	}
	if d, _ := w.q.Depth(t.Context()); d.Waiting != 0 {
		t.Fatal("moved before approval")
	}
	_, theirs := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
	if !strings.Contains(theirs, `id="approve"`) {
		t.Fatalf("another operator sees no approve button:\n%s", theirs)
	}
	if code, body := as(t, "ivan", "POST", srv.URL+"/proposals/approve", url.Values{"csrf": {csrfOf(t, theirs)}, "id": {id}}); code != http.StatusOK {
		t.Fatalf("approve: %d\n%s", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, p := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
		if strings.Contains(p, `<strong id="pstate">done</strong>`) {
			if !strings.Contains(p, "1 of 1") || !strings.Contains(p, "1 moved") {
				t.Fatalf("done page:\n%s", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not finish:\n%s", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d, _ := w.q.Depth(t.Context()); d.Waiting != 1 || d.DLQ != 1 {
		t.Fatalf("after the run: %+v, want the failed charge back and the conflict left", d)
	}
	// Every step in the trail, chained.
	f, err := os.Open(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := auditpkg.Verify(f, w.audit, auditpkg.Report{}); err != nil {
		t.Fatal(err)
	}
	_, trail := as(t, "ivan", "GET", srv.URL+"/audit?proposal="+id, nil)
	for _, want := range []string{"propose", "approve", "refused", "batch", "done"} {
		if !strings.Contains(trail, want) {
			t.Fatalf("the audit page lacks %q:\n%s", want, trail)
		}
	}
}

func TestAReopenWithANewAttemptIsProposedUnderFourEyes(t *testing.T) {
	w := newWorld(t)
	srv := w.consoleWith(t, proxyAuth(), w.withBook(t, "reopen-new-attempt"))
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	// The confirmation says, before the button, that it is proposed.
	if !strings.Contains(page, `id="four-eyes-note"`) {
		t.Fatalf("the confirmation does not say a new attempt is proposed under four-eyes:\n%s", page)
	}
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)},
		"reason": {"INC-13: funds arrived"}, "new_attempt": {"on"}})
	if code != http.StatusAccepted || proposalIDRE.FindString(body) == "" || !strings.Contains(body, "Nothing was reopened yet") {
		t.Fatalf("reopen --new-attempt under four-eyes: %d\n%s", code, body)
	}
	rec, err := w.store.Get(t.Context(), w.failed, time.Now())
	if err != nil || rec.State != driver.StateFailed {
		t.Fatalf("reopened without approval: %+v %v", rec, err)
	}
	// Without the policy the confirmation says nothing of a proposal.
	w2 := newWorld(t)
	_, page = as(t, "olga", "GET", w2.console(t, proxyAuth()).URL+"/charge/reopen?id="+url.QueryEscape(w2.failed), nil)
	if strings.Contains(page, `id="four-eyes-note"`) || !strings.Contains(page, `id="new-attempt"`) {
		t.Fatalf("without four-eyes, the confirmation:\n%s", page)
	}
}

const closedCharge = "CHG-CLOSED-7"

// withHardDecline adds a charge the bank declined ACCOUNT_CLOSED (a hard
// decline), FAILED and dead-lettered as debit_failed.
func (w *world) withHardDecline(t *testing.T) {
	t.Helper()
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := charge.MarshalEvent(charge.Charge{ID: closedCharge, AccountID: account, Amount: charge.Money{Minor: 4200, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), closedCharge, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "debit declined: ACCOUNT_CLOSED"); err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, body, queue.Reason{Code: chargehandler.Code(charge.DebitFailed), Detail: "declined: ACCOUNT_CLOSED"})
}

func waitDone(t *testing.T, url, who string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, p := as(t, who, "GET", url, nil)
		if strings.Contains(p, `<strong id="pstate">done</strong>`) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not finish:\n%s", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Issue 51: the console's bulk reopen with a new attempt holds a hard
// decline back (its page shows it, with its code, masked account and
// amount, and each target's decline code); the approved run never reopens
// it; the form filters by decline code.
func TestTheConsoleHoldsAHardDeclineBackFromABulkReopen(t *testing.T) {
	w := newWorld(t)
	w.withHardDecline(t)
	srv := w.consoleWith(t, console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}, w.withBook(t, "reopen-new-attempt"))
	_, page := as(t, "olga", "GET", srv.URL+"/proposals?kind=reopen&decline_code=ACCOUNT_FROZEN", nil)
	if !strings.Contains(page, `name="decline_code" value="ACCOUNT_FROZEN"`) {
		t.Fatalf("the form has no decline-code filter:\n%s", page)
	}
	csrf := csrfOf(t, page)
	propose := func(declineCode string) (int, string) {
		return as(t, "olga", "POST", srv.URL+"/proposals/new", url.Values{"csrf": {csrf}, "kind": {"reopen"}, "new_attempt": {"on"},
			"decline_code": {declineCode}, "reason": {"INC-51: funds arrived"}})
	}
	// The filter: only the soft decline; the hard one alone is not proposed.
	code, body := propose("account frozen")
	if code != http.StatusOK || !strings.Contains(body, "1 charge(s), INR 25.01 (1)") || strings.Contains(body, closedCharge) {
		t.Fatalf("propose --decline-code: %d\n%s", code, body)
	}
	if code, body := propose("ACCOUNT_CLOSED"); code != http.StatusConflict || !strings.Contains(body, closedCharge+" declined ACCOUNT_CLOSED") {
		t.Fatalf("a proposal of the hard decline alone: %d\n%s", code, body)
	}
	code, body = propose("")
	id := proposalIDRE.FindString(body)
	if code != http.StatusOK || id == "" || !strings.Contains(body, "1 held back") {
		t.Fatalf("propose: %d\n%s", code, body)
	}
	_, theirs := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
	for _, want := range []string{`id="held"`, closedCharge, "ACCOUNT_CLOSED HARD DECLINE (the account is closed)", "INR 42.00", "ACCOUNT_FROZEN", "********" + account[len(account)-4:]} {
		if !strings.Contains(theirs, want) {
			t.Fatalf("the proposal page lacks %q:\n%s", want, theirs)
		}
	}
	if strings.Contains(theirs, account) {
		t.Fatalf("an account in clear:\n%s", theirs)
	}
	if code, body := as(t, "ivan", "POST", srv.URL+"/proposals/approve", url.Values{"csrf": {csrfOf(t, theirs)}, "id": {id}}); code != http.StatusOK {
		t.Fatalf("approve: %d\n%s", code, body)
	}
	if done := waitDone(t, srv.URL+"/proposals/show?id="+id, "ivan"); !strings.Contains(done, "1 reopened") {
		t.Fatalf("done page:\n%s", done)
	}
	if rec, err := w.store.Get(t.Context(), closedCharge, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Generation > 1 {
		t.Fatalf("the hard decline was reopened: %+v %v", rec, err)
	}
	if rec, _ := w.store.Get(t.Context(), w.failed, time.Now()); rec.Generation != 2 {
		t.Fatalf("the soft decline was not reopened: %+v", rec)
	}
}

// Under represent-hard-decline the charge's reopen with a new attempt of a
// hard decline becomes a proposal (never done directly), whose page marks
// it with its code for the approver.
func TestTheConsoleProposesAHardDeclineOnlyUnderRepresentHardDecline(t *testing.T) {
	for _, tc := range []struct {
		policy string
		code   int
	}{
		{"off", http.StatusConflict},
		{"represent-hard-decline", http.StatusAccepted},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			w := newWorld(t)
			w.withHardDecline(t)
			srv := w.consoleWith(t, console.ProxyAuth{Operators: []string{"olga", "ivan"}, Trusted: loopback}, w.withBook(t, tc.policy))
			_, confirm := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+closedCharge, nil)
			if !strings.Contains(confirm, `id="hard-decline"`) || strings.Contains(confirm, `id="new-attempt"`) != (tc.code == http.StatusAccepted) {
				t.Fatalf("the reopen page:\n%s", confirm)
			}
			code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {closedCharge}, "csrf": {csrfOf(t, confirm)},
				"reason": {"mandate re-signed"}, "new_attempt": {"on"}})
			if code != tc.code || !strings.Contains(body, "ACCOUNT_CLOSED") {
				t.Fatalf("reopen --new-attempt of a hard decline: %d\n%s", code, body)
			}
			if rec, _ := w.store.Get(t.Context(), closedCharge, time.Now()); rec.State != driver.StateFailed || rec.Generation > 1 {
				t.Fatalf("reopened directly: %+v", rec)
			}
			if tc.code != http.StatusAccepted {
				return
			}
			id := proposalIDRE.FindString(body)
			_, theirs := as(t, "ivan", "GET", srv.URL+"/proposals/show?id="+id, nil)
			if !strings.Contains(theirs, `class="hard-decline"`) || !strings.Contains(theirs, "<strong>ACCOUNT_CLOSED HARD DECLINE") || !strings.Contains(theirs, `id="approve"`) {
				t.Fatalf("the approver's page does not show the hard decline:\n%s", theirs)
			}
		})
	}
}

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
