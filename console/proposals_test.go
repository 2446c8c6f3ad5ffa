package console_test

import (
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/console"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	auditpkg "github.com/finedge/idempotent-consumer/internal/audit"
	"github.com/finedge/idempotent-consumer/service/approval"
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
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)},
		"reason": {"INC-13: funds arrived"}, "new_attempt": {"on"}})
	if code != http.StatusAccepted || proposalIDRE.FindString(body) == "" {
		t.Fatalf("reopen --new-attempt under four-eyes: %d\n%s", code, body)
	}
	rec, err := w.store.Get(t.Context(), w.failed, time.Now())
	if err != nil || rec.State != driver.StateFailed {
		t.Fatalf("reopened without approval: %+v %v", rec, err)
	}
}
