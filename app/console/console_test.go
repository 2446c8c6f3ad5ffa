package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

const account = "001234567890"

// world is a backend with one DONE, one FAILED charge (its message on the
// DLQ as debit_failed) and a conflict on the DLQ.
type world struct {
	q      *memqueue.Queue
	store  *memstore.Store
	failed string // a charge id with / and .
	audit  string
}

// failedWith records id FAILED with detail (a decline), as a consumer
// would, and returns id.
func (w *world) failedWith(t *testing.T, id, detail string) string {
	t.Helper()
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), id, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", detail); err != nil {
		t.Fatal(err)
	}
	return id
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{q: memqueue.New(memqueue.Options{}), store: memstore.New(), failed: "CHG-2026/11.000123", audit: filepath.Join(t.TempDir(), "audit.jsonl")}
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"CHG-DONE-1", w.failed} {
		c := charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: 2500 + int64(i), Currency: "INR"}, Type: charge.SMSAlertFee,
			DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := g.Claim(ctx, id, "fp")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := g.Complete(ctx, cl.Lease(), "DEBITED", "CBS0000000001"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := g.Fail(ctx, cl.Lease(), "FAILED", "debit declined: ACCOUNT_FROZEN"); err != nil {
			t.Fatal(err)
		}
		w.deadLetter(t, body, queue.Reason{Code: chargehandler.Code(charge.DebitFailed), Detail: "declined: ACCOUNT_FROZEN for account " + account})
	}
	w.deadLetter(t, []byte(`{"chargeId":"CHG-CONFLICT","accountId":"`+account+`"}`), queue.Reason{Code: chargehandler.Code(charge.Conflict), Detail: "another payload"})
	// Debited, its notice failed: the record keeps the notice to send.
	c := charge.Charge{ID: "CHG-NOTE-1", AccountID: account, Amount: charge.Money{Minor: 3100, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	notice, err := charge.NoticeOf(c, charge.DebitReceipt{Reference: "CBS0000000042"}, time.Now()).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(ctx, c.ID, "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Complete(ctx, cl.Lease(), string(charge.DebitedNotificationFailed), string(notice)); err != nil {
		t.Fatal(err)
	}
	return w
}

// sender is a notification channel that records what it sent.
type sender struct {
	mu   sync.Mutex
	sent []charge.Notice
}

func (s *sender) SendNotice(_ context.Context, n charge.Notice) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, n)
	return nil
}

func (w *world) deadLetter(t *testing.T, body []byte, r queue.Reason) {
	t.Helper()
	if _, err := w.q.Send(t.Context(), body, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := w.q.Receive(t.Context(), 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %d", err, len(msgs))
	}
	if err := w.q.DeadLetter(t.Context(), msgs[0], r); err != nil {
		t.Fatal(err)
	}
}

func (w *world) console(t *testing.T, auth console.Authenticator, rn ...*operate.Renotifier) *httptest.Server {
	t.Helper()
	return w.consoleWith(t, auth, nil, rn...)
}

// consoleWith is console with the options changed by set (nil: as they are).
func (w *world) consoleWith(t *testing.T, auth console.Authenticator, set func(*console.Options), rn ...*operate.Renotifier) *httptest.Server {
	t.Helper()
	audit, err := console.OpenAuditLog(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	var renotifier *operate.Renotifier
	if len(rn) > 0 {
		renotifier = rn[0]
	}
	o := console.Options{Backend: "memory", Queue: w.q, Store: w.store, Auth: auth, Audit: audit, ActionBurst: 3, ActionsPerMinute: 1,
		Renotifier: renotifier,
		Logger:     slog.New(slog.NewTextHandler(tlog{t}, nil))}
	if set != nil {
		set(&o)
	}
	c, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	return srv
}

// tlog writes the console's log to the test's.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) { l.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func proxyAuth() console.ProxyAuth {
	return console.ProxyAuth{Operators: []string{"olga"}, Trusted: loopback}
}

// as sends a request as user (through the trusted proxy's header).
func as(t *testing.T, user, method, u string, form url.Values, hdr ...string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		req.Header.Set("X-Auth-Request-User", user)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, page := send(t, req)
	return resp.StatusCode, page
}

// send sends req and returns the answer and its body (read and closed).
func send(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// getAs is the answer to a GET of u signed in (by the proxy's header) as
// user.
func getAs(t *testing.T, user, u string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Request-User", user)
	resp, _ := send(t, req)
	return resp
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// dlqIDs are the ids of the DLQ entries, by charge id.
func (w *world) dlqIDs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	_, err := w.q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Force: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) {
		out[chargeIDIn(string(e.Body))] = e.ID
	}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var chargeIDRE = regexp.MustCompile(`"chargeId":"([^"]*)"`)

func chargeIDIn(body string) string {
	if m := chargeIDRE.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

func TestNoAnonymousAccess(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	for _, path := range []string{"/", "/dlq", "/charge?id=CHG-DONE-1", "/overview/fragment", "/overview.json", "/audit", "/stuck", "/records?state=FAILED", "/reconciliation"} {
		if code, _ := as(t, "", "GET", srv.URL+path, nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a user: %d, want 401", path, code)
		}
	}
	// A header from anywhere but the trusted proxy counts for nothing.
	far := console.ProxyAuth{Operators: []string{"olga"}, Trusted: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}}
	srv2 := w.console(t, far)
	if code, body := as(t, "olga", "GET", srv2.URL+"/", nil); code != http.StatusUnauthorized || !strings.Contains(body, "trusted sign-in proxy") {
		t.Errorf("a user header from an untrusted address: %d %q, want 401", code, body)
	}
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	srv := newWorld(t).console(t, proxyAuth())
	for _, path := range []string{"/", "/dlq", "/static/console.js", "/nope"} {
		resp := getAs(t, "vera", srv.URL+path)
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP allows inline code: %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
	}
}

func TestPagesMaskAccountsAndTakeIDsWithSlashesAndDots(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	ids := w.dlqIDs(t)
	pages := map[string]string{
		"/":                        "Overview",
		"/dlq":                     w.failed,
		"/dlq?reason=debit_failed": w.failed,
		"/dlq/entry?id=" + url.QueryEscape(ids[w.failed]): "ACCOUNT_FROZEN",
		"/charge?id=" + url.QueryEscape(w.failed):         "debit declined: ACCOUNT_FROZEN",
		"/charge?id=CHG-DONE-1":                           "CBS0000000001",
	}
	for path, want := range pages {
		code, body := as(t, "vera", "GET", srv.URL+path, nil)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", path, code, want, body)
		}
		if strings.Contains(body, account) {
			t.Errorf("GET %s shows the full account number", path)
		}
	}
	if code, body := as(t, "vera", "GET", srv.URL+"/dlq?reason=nonsense", nil); code != http.StatusBadRequest || !strings.Contains(body, "not a reason code") {
		t.Errorf("an unknown reason filter: %d", code)
	}
}

func TestOnlyAnOperatorWithTheSessionsTokenActs(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	ids := w.dlqIDs(t)
	entry := ids[w.failed]
	redrive := srv.URL + "/dlq/redrive"
	_, confirm := as(t, "olga", "GET", redrive+"?id="+url.QueryEscape(entry), nil)
	token := csrfOf(t, confirm)
	_, viewerPage := as(t, "vera", "GET", srv.URL+"/", nil)
	viewerToken := csrfOf(t, viewerPage)

	cases := []struct {
		name, user string
		form       url.Values
		hdr        []string
		want       int
	}{
		{"a viewer, with her own token", "vera", url.Values{"id": {entry}, "csrf": {viewerToken}}, nil, http.StatusForbidden},
		{"an operator without the token", "olga", url.Values{"id": {entry}}, nil, http.StatusForbidden},
		{"an operator with another session's token", "olga", url.Values{"id": {entry}, "csrf": {viewerToken}}, nil, http.StatusForbidden},
		{"an operator from another site's page", "olga", url.Values{"id": {entry}, "csrf": {token}}, []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"a cross-site fetch", "olga", url.Values{"id": {entry}, "csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
	}
	for _, tc := range cases {
		if code, body := as(t, tc.user, "POST", redrive, tc.form, tc.hdr...); code != tc.want {
			t.Errorf("%s: %d, want %d:\n%s", tc.name, code, tc.want, body)
		}
		if d, _ := w.q.Depth(t.Context()); d.DLQ != 2 || d.Waiting != 0 {
			t.Fatalf("%s: the DLQ changed: %+v", tc.name, d)
		}
	}
	// The operator, with her token: moved, once.
	code, body := as(t, "olga", "POST", redrive, url.Values{"id": {entry}, "csrf": {token}})
	if code != http.StatusOK || !strings.Contains(body, "back on the queue") {
		t.Fatalf("operator's redrive: %d\n%s", code, body)
	}
	if d, _ := w.q.Depth(t.Context()); d.DLQ != 1 || d.Waiting != 1 {
		t.Fatalf("after the redrive: %+v, want 1 waiting, 1 on the DLQ", d)
	}
	// A conflict is held back.
	code, _ = as(t, "olga", "POST", redrive, url.Values{"id": {ids["CHG-CONFLICT"]}, "csrf": {token}})
	if d, _ := w.q.Depth(t.Context()); code != http.StatusConflict || d.DLQ != 1 {
		t.Fatalf("redrive of a conflict: %d, depth %+v; want 409 and still on the DLQ", code, d)
	}
	// Rate limit: burst 3, one a minute: the next is refused.
	code, _ = as(t, "olga", "POST", redrive, url.Values{"id": {"nothing"}, "csrf": {token}})
	if code != http.StatusNotFound {
		t.Fatalf("third action: %d, want 404 (no such entry)", code)
	}
	if code, _ = as(t, "olga", "POST", redrive, url.Values{"id": {"nothing"}, "csrf": {token}}); code != http.StatusTooManyRequests {
		t.Fatalf("fourth action within the minute: %d, want 429", code)
	}
	// The audit trail has every refusal and the move, with who did it.
	b, err := os.ReadFile(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	trail := string(b)
	for _, want := range []string{`"operator":"vera","role":"viewer","action":"refused"`, `"operator":"olga","role":"operator","action":"redrive","chargeId":"` + w.failed + `"`,
		`"result":"moved"`, `"result":"held back"`, "more than 1 actions a minute"} {
		if !strings.Contains(trail, want) {
			t.Errorf("the audit trail lacks %s:\n%s", want, trail)
		}
	}
	if strings.Contains(trail, account) {
		t.Error("the audit trail holds a full account number")
	}
	_, page := as(t, "vera", "GET", srv.URL+"/audit", nil)
	if !strings.Contains(page, "moved") || !strings.Contains(page, "olga") {
		t.Errorf("the audit page does not show the redrive:\n%s", page)
	}
}

// A hard decline is never presented again under a new key, from the
// console either: the page says why, the trail has the refusal, the
// record stays FAILED.
func TestAHardDeclineIsNotPresentedAgainFromTheConsole(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	hard := w.failedWith(t, "CHG-2026/11.000777", "debit declined: ACCOUNT_CLOSED: declined by core banking")
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(hard), nil)
	token := csrfOf(t, page)
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {hard}, "csrf": {token}, "reason": {"INC-4711"}, "new_attempt": {"on"}})
	if code != http.StatusConflict || !strings.Contains(body, "ACCOUNT_CLOSED, is a hard decline") {
		t.Fatalf("a new attempt on a hard decline: %d, want 409 naming the hard decline\n%s", code, body)
	}
	if rec, err := w.store.Get(t.Context(), hard, time.Now()); err != nil || rec.State != driver.StateFailed || max(rec.Generation, 1) != 1 {
		t.Fatalf("the hard decline's record after the refused reopen: %+v %v", rec, err)
	}
	trail, err := os.ReadFile(w.audit)
	if err != nil || !strings.Contains(string(trail), `"detail":"a hard decline: ACCOUNT_CLOSED"`) {
		t.Fatalf("the trail lacks the refusal: %v\n%s", err, trail)
	}
}

func TestReopenFromTheConsoleIsRecordedWithTheOperator(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	token := csrfOf(t, page)
	if code, _ := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {token}}); code != http.StatusBadRequest {
		t.Fatalf("reopen without a reason: %d, want 400", code)
	}
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {token}, "reason": {"INC-4711: account reopened"}, "new_attempt": {"on"}})
	if code != http.StatusOK {
		t.Fatalf("reopen: %d\n%s", code, body)
	}
	rec, err := w.store.Get(t.Context(), w.failed, time.Now())
	if err != nil || rec.State != driver.StateInProgress || rec.Generation != 2 || len(rec.History) != 1 ||
		!strings.Contains(rec.History[0], "olga (console)") || !strings.Contains(rec.History[0], "INC-4711") {
		t.Fatalf("record after reopen: %+v %v", rec, err)
	}
	// Once reopened it is not FAILED: a second reopen is refused.
	if code, _ := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {token}, "reason": {"again"}}); code != http.StatusConflict {
		t.Fatalf("a second reopen: %d, want 409", code)
	}
	_, chargePage := as(t, "vera", "GET", srv.URL+"/charge?id="+url.QueryEscape(w.failed), nil)
	if !strings.Contains(chargePage, "INC-4711") || !strings.Contains(chargePage, w.failed+"~2") {
		t.Errorf("the charge page does not show the trail and the new bank key:\n%s", chargePage)
	}
}

func TestTokenSignIn(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte(hashLines("# name role token\nolga operator olga-0123456789abcdef\nvera viewer vera-0123456789abcdef\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := console.NewTokenAuth(console.TokenOptions{File: file, TTL: time.Hour, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := w.console(t, auth)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	resp, err := client.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/signin" {
		t.Fatalf("an anonymous visit ended at %s, want the sign-in page", resp.Request.URL.Path)
	}
	resp, err = client.PostForm(srv.URL+"/signin", url.Values{"token": {"wrong-0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d, want 401", resp.StatusCode)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.PostForm(srv.URL+"/signin", url.Values{"token": {"vera-0123456789abcdef"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cs := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 {
		t.Fatalf("sign-in: %d, cookies %v", resp.StatusCode, cs)
	}
	c := cs[0]
	if c.Name != "__Host-chargerecovery-console" || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Fatalf("session cookie %+v: want __Host-, HttpOnly, Secure, SameSite=Strict, Path=/", c)
	}
	get := func(v string) int {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/dlq", nil)
		req.AddCookie(&http.Cookie{Name: c.Name, Value: v})
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(c.Value); code != http.StatusOK {
		t.Fatalf("with the session: %d", code)
	}
	// The cookie is a random session id and nothing else: a changed or
	// made-up one is nobody's.
	if strings.Contains(c.Value, "vera") || strings.Contains(c.Value, "viewer") {
		t.Fatalf("the cookie %q says who it is for: it should be an opaque id", c.Value)
	}
	if code := get(c.Value[:len(c.Value)-2] + "xx"); code != http.StatusSeeOther {
		t.Fatalf("a changed session id: %d", code)
	}
	if code := get("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"); code != http.StatusSeeOther {
		t.Fatalf("a made-up session id: %d", code)
	}
	for _, bad := range []string{"olga operator short\n", "olga boss olga-0123456789abcdef\n", "olga\n", "# nothing\n"} {
		f := filepath.Join(dir, fmt.Sprintf("bad-%d", len(bad)))
		os.WriteFile(f, []byte(bad), 0o600)
		if _, err := console.ReadTokenFile(f); err == nil {
			t.Errorf("token file %q accepted", bad)
		}
	}
}

// Renotify from the console sends the kept notice once, with its key, and
// the record becomes DEBITED with the operator in its history; the bank
// is not involved.
func TestRenotifyFromTheConsoleSendsTheKeptNoticeOnce(t *testing.T) {
	w := newWorld(t)
	snd := &sender{}
	claims, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := w.console(t, proxyAuth(), &operate.Renotifier{Sender: snd, Amender: w.store, Claims: claims, Channel: "test"})
	code, page := as(t, "olga", "GET", srv.URL+"/charge?id=CHG-NOTE-1", nil)
	if code != http.StatusOK || !strings.Contains(page, `id="renotify"`) || !strings.Contains(page, "CBS0000000042") {
		t.Fatalf("the charge page offers no renotify or shows no reference: %d\n%s", code, page)
	}
	_, confirm := as(t, "olga", "GET", srv.URL+"/charge/renotify?id=CHG-NOTE-1", nil)
	form := url.Values{"id": {"CHG-NOTE-1"}, "csrf": {csrfOf(t, confirm)}, "reason": {"INC-77: SMS gateway back"}}
	if code, body := as(t, "olga", "POST", srv.URL+"/charge/renotify", form); code != http.StatusOK {
		t.Fatalf("renotify: %d\n%s", code, body)
	}
	if code, _ := as(t, "olga", "POST", srv.URL+"/charge/renotify", form); code != http.StatusConflict {
		t.Fatalf("a second renotify: %d, want 409 (the record is DEBITED now)", code)
	}
	if len(snd.sent) != 1 || snd.sent[0].NotificationKey != "CHG-NOTE-1:pre-debit" || snd.sent[0].Reference != "CBS0000000042" {
		t.Fatalf("sent %+v, want the kept notice once", snd.sent)
	}
	rec, err := w.store.Get(t.Context(), "CHG-NOTE-1", time.Now())
	if err != nil || rec.Status != string(charge.Debited) || rec.Detail != "CBS0000000042" || len(rec.History) != 1 || !strings.Contains(rec.History[0], "olga (console)") {
		t.Fatalf("record after renotify: %+v %v", rec, err)
	}
	// Without a channel the console does not offer it.
	srv2 := newWorld(t).console(t, proxyAuth())
	if _, page := as(t, "olga", "GET", srv2.URL+"/charge?id=CHG-NOTE-1", nil); strings.Contains(page, `id="renotify"`) {
		t.Error("a console without a channel offers renotify")
	}
}

// TestConsoleRefusesAReopenThatCannotHelp: the failed charge was declined
// by the bank; reopened under the same key it would be declined again, so
// the console refuses it and names the reopen that would help (the new
// attempt), offered on the DLQ entry page next to Redrive; the confirm
// page says the state once.
func TestConsoleRefusesAReopenThatCannotHelp(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	_, entry := as(t, "olga", "GET", srv.URL+"/dlq/entry?id="+url.QueryEscape(w.dlqIDs(t)[w.failed]), nil)
	if !strings.Contains(entry, `id="redrive"`) || !strings.Contains(entry, `id="reopen"`) || !strings.Contains(entry, "Reopen with a new attempt") {
		t.Errorf("the DLQ entry page of a declined charge does not offer Reopen with a new attempt:\n%s", entry)
	}
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	if strings.Contains(page, "FAILED FAILED") || !strings.Contains(page, "now FAILED: debit declined: ACCOUNT_FROZEN") {
		t.Errorf("the confirm page says the state twice or not at all:\n%s", page)
	}
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"INC-1: account reopened"}})
	if code != http.StatusConflict || !strings.Contains(body, "declined again") || !strings.Contains(body, "chargerecovery reopen --new-attempt") {
		t.Fatalf("a plain reopen of a decline: %d\n%s", code, body)
	}
	if rec, err := w.store.Get(t.Context(), w.failed, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Reopens != 0 {
		t.Fatalf("the refused reopen changed the record: %+v %v", rec, err)
	}
	trail, err := os.ReadFile(w.audit)
	if err != nil || !strings.Contains(string(trail), "the same key is declined again") {
		t.Errorf("the audit trail lacks the refusal (%v):\n%s", err, trail)
	}
}
