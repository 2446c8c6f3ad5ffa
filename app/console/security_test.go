package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

const (
	olgaToken = "olga-0123456789abcdef"
	veraToken = "vera-0123456789abcdef"
)

// tokenFile writes lines to a fresh token file (0600) and returns its path.
func tokenFile(t *testing.T, lines ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	rewrite(t, f, lines...)
	return f
}

// rewrite replaces the token file's lines, by rename, as an operator's
// tooling would.
func rewrite(t *testing.T, f string, lines ...string) {
	t.Helper()
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, []byte(hashLines(strings.Join(lines, "\n")+"\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
}

// hashLines is a token file's text with each "NAME ROLE TOKEN" line's
// token replaced by its hash, as the file keeps it (console.TokenLine);
// other lines (comments, malformed ones under test) as they are.
func hashLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		w := strings.Fields(l)
		if len(w) == 3 && len(w[2]) >= 16 && !strings.HasPrefix(w[2], console.TokenHashPrefix) && !strings.HasPrefix(l, "#") {
			if r, err := console.ParseRole(w[1]); err == nil {
				l = console.TokenLine(w[0], r, w[2], "")
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// browser is a client that keeps one person's session cookie.
type browser struct {
	t      *testing.T
	base   string
	cookie *http.Cookie
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// signIn signs in with token and returns the browser holding the session.
func signIn(t *testing.T, base, token string) *browser {
	t.Helper()
	resp, err := noRedirects().PostForm(base+"/signin", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	return &browser{t: t, base: base, cookie: resp.Cookies()[0]}
}

func (b *browser) do(method, path string, form url.Values) (int, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequestWithContext(b.t.Context(), method, b.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.AddCookie(b.cookie)
	resp, err := noRedirects().Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

func tokenAuth(t *testing.T, file string) *console.TokenAuth {
	t.Helper()
	a, err := console.NewTokenAuth(console.TokenOptions{File: file, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A line removed from the token file ends its live sessions and its token
// at the next request, without a restart; a changed token ends the
// sessions the old one made; a demotion counts at once.
func TestTheTokenFileRevokesAtTheNextRequest(t *testing.T) {
	w := newWorld(t)
	file := tokenFile(t, "olga operator "+olgaToken, "vera viewer "+veraToken)
	srv := w.console(t, tokenAuth(t, file))
	olga, vera := signIn(t, srv.URL, olgaToken), signIn(t, srv.URL, veraToken)
	if code, _ := olga.do("GET", "/dlq", nil); code != http.StatusOK {
		t.Fatalf("olga's session: %d", code)
	}
	_, page := olga.do("GET", "/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	csrf := csrfOf(t, page)

	rewrite(t, file, "vera viewer "+veraToken) // olga leaves
	if code, _ := olga.do("GET", "/dlq", nil); code != http.StatusSeeOther {
		t.Fatalf("olga's live session after her line was removed: %d, want a redirect to sign in", code)
	}
	if code, _ := olga.do("POST", "/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrf}, "reason": {"x"}}); code != http.StatusUnauthorized {
		t.Fatalf("olga's action after removal: %d, want 401", code)
	}
	if rec, _ := w.store.Get(t.Context(), w.failed, time.Now()); rec.State != driver.StateFailed {
		t.Fatalf("the record moved: %s", rec.State)
	}
	resp, err := noRedirects().PostForm(srv.URL+"/signin", url.Values{"token": {olgaToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("olga's removed token signed in: %d", resp.StatusCode)
	}
	if code, _ := vera.do("GET", "/dlq", nil); code != http.StatusOK {
		t.Fatalf("vera's session ended with olga's line: %d", code)
	}

	// Olga back with a new token: the session of her old one stays ended.
	old := signIn(t, srv.URL, veraToken) // a session of vera's current token
	rewrite(t, file, "vera viewer vera-NEW-0123456789abcdef", "olga operator "+olgaToken)
	if code, _ := old.do("GET", "/dlq", nil); code != http.StatusSeeOther {
		t.Fatalf("a session of a replaced token: %d", code)
	}
	// A demotion counts for a live session at once.
	olga = signIn(t, srv.URL, olgaToken)
	rewrite(t, file, "olga viewer "+olgaToken)
	_, page = olga.do("GET", "/", nil)
	if code, body := olga.do("POST", "/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"x"}}); code != http.StatusForbidden || !strings.Contains(body, "viewer") {
		t.Fatalf("a demoted operator's action: %d", code)
	}
	// A token file that can no longer be read, or is opened to others,
	// admits nobody until it is fixed.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := olga.do("GET", "/dlq", nil); code != http.StatusSeeOther {
		t.Fatalf("with the token file opened to others: %d", code)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := olga.do("GET", "/dlq", nil); code != http.StatusOK {
		t.Fatalf("with the token file fixed: %d", code)
	}
}

// Signing out ends the session on the server: a copy of the cookie acts
// for nobody afterwards.
func TestSignOutEndsTheSessionForEveryCopyOfTheCookie(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, tokenAuth(t, tokenFile(t, "olga operator "+olgaToken)))
	olga := signIn(t, srv.URL, olgaToken)
	stolen := &browser{t: t, base: srv.URL, cookie: olga.cookie}
	_, page := olga.do("GET", "/", nil)
	if code, _ := olga.do("POST", "/signout", url.Values{"csrf": {csrfOf(t, page)}}); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", code)
	}
	if code, _ := stolen.do("GET", "/dlq", nil); code != http.StatusSeeOther {
		t.Fatalf("a copy of the cookie after sign-out: %d, want a redirect to sign in", code)
	}
	if code, _ := stolen.do("POST", "/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"x"}}); code != http.StatusUnauthorized {
		t.Fatalf("an action with a copy of the cookie after sign-out: %d", code)
	}
}

// A token file: owner-only, and an error never quotes a line (a line with
// its columns swapped would print the token).
func TestTheTokenFileIsOwnerOnlyAndNeverQuoted(t *testing.T) {
	f := tokenFile(t, "olga operator "+olgaToken)
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := console.NewTokenAuth(console.TokenOptions{File: f}); !errors.Is(err, secretfile.ErrOpen) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a 0644 token file: %v", err)
	}
	for _, line := range []string{"olga " + olgaToken + " operator", olgaToken + " olga operator", "olga operator " + olgaToken + " extra", "olga operator olga-short"} {
		f := tokenFile(t, line)
		_, err := console.NewTokenAuth(console.TokenOptions{File: f})
		if err == nil {
			t.Fatalf("%q accepted", line)
		}
		if strings.Contains(err.Error(), "olga-") {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
}

// The audit trail fails closed: when its line cannot be written, the
// action is not taken and the page says why.
func TestAnActionIsTakenOnlyOnceItsAuditLineIsWritten(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	w := newWorld(t)
	w.audit = "/dev/full" // every write fails as on a full disk
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"INC-1"}, "new_attempt": {"on"}})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "audit trail cannot be written") {
		t.Fatalf("reopen with the audit file full: %d\n%s", code, body)
	}
	rec, err := w.store.Get(t.Context(), w.failed, time.Now())
	if err != nil || rec.State != driver.StateFailed || rec.Generation != 1 {
		t.Fatalf("the record after a refused reopen: %+v %v; want FAILED, generation 1", rec, err)
	}
	ids := w.dlqIDs(t)
	_, page = as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(ids[w.failed]), nil)
	if code, _ := as(t, "olga", "POST", srv.URL+"/dlq/redrive", url.Values{"id": {ids[w.failed]}, "csrf": {csrfOf(t, page)}}); code != http.StatusServiceUnavailable {
		t.Fatalf("redrive with the audit file full: %d", code)
	}
	if d, _ := w.q.Depth(t.Context()); d.DLQ != 2 || d.Waiting != 0 {
		t.Fatalf("the DLQ moved: %+v", d)
	}
}

// An action's request line is in the trail before it is taken, its result
// line before the answer is sent.
func TestTheAuditTrailHoldsTheRequestAndTheResultBeforeTheAnswer(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, proxyAuth())
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	code, _ := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"INC-2"}, "new_attempt": {"on"}})
	if code != http.StatusOK {
		t.Fatalf("reopen: %d", code)
	}
	entries := auditEntries(t, w.audit)
	var got []string
	for _, e := range entries {
		if e.ChargeID == w.failed {
			got = append(got, e.Action+":"+e.Result)
		}
	}
	if strings.Join(got, ",") != "reopen:requested,reopen --new-attempt:reopened" {
		t.Fatalf("the trail for the reopen: %v, want the request then the result", got)
	}
}

func auditEntries(t *testing.T, path string) []console.AuditEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []console.AuditEntry
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var e console.AuditEntry
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatalf("a torn audit line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

// An audit file that exists open to others is tightened to 0600.
func TestTheAuditFileIsOwnerOnly(t *testing.T) {
	for _, existing := range []bool{false, true} {
		p := filepath.Join(t.TempDir(), "audit.jsonl")
		if existing {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		a, err := console.OpenAuditLog(p)
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		st, _ := os.Stat(p)
		if st.Mode().Perm() != 0o600 {
			t.Errorf("existing %v: mode %04o, want 0600", existing, st.Mode().Perm())
		}
	}
}

// A flood of bad tokens is counted, not written line by line: the trail
// gets one summary line per address, and an operator's action stays on
// the audit page.
func TestRefusedSignInsAreSummarisedNotFlooded(t *testing.T) {
	w := newWorld(t)
	file := tokenFile(t, "olga operator "+olgaToken)
	srv := w.consoleWith(t, tokenAuth(t, file), func(o *console.Options) { o.RefusalSummary = 500 * time.Millisecond })
	olga := signIn(t, srv.URL, olgaToken)
	_, page := olga.do("GET", "/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	if code, _ := olga.do("POST", "/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"INC-3"}, "new_attempt": {"on"}}); code != http.StatusOK {
		t.Fatalf("reopen: %d", code)
	}
	for i := range 300 {
		resp, err := http.PostForm(srv.URL+"/signin", url.Values{"token": {fmt.Sprintf("bad-token-%020d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("bad token %d: %d", i, resp.StatusCode)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var refused []console.AuditEntry
	total := 0
	for total < 300 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		refused, total = refused[:0], 0
		for _, e := range auditEntries(t, w.audit) {
			if e.Action == "signin" && e.Result == "refused" {
				refused = append(refused, e)
				var n int
				if _, err := fmt.Sscanf(e.Detail, "%d refused", &n); err != nil || e.Remote != "127.0.0.1" {
					t.Fatalf("a summary line %+v: want a count and the address", e)
				}
				total += n
			}
		}
	}
	// One line per address per half second: the flood took a few of them
	// at most, never a line per attempt.
	if total != 300 || len(refused) > 20 {
		t.Fatalf("%d refused sign-ins summarised in %d lines, want 300 in a few", total, len(refused))
	}
	_, audit := olga.do("GET", "/audit", nil)
	if !strings.Contains(audit, "INC-3") {
		t.Fatalf("the operator's reopen is not on the audit page after the flood:\n%s", audit)
	}
}

// Behind a trusted TLS-terminating proxy each client has its own address
// (one bad client does not lock out every sign-in); from anyone else,
// X-Forwarded-For is the client's say-so and counts for nothing.
func TestForwardedAddressesCountOnlyFromTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		locked  bool // a second client is refused once the first used up the limit
	}{
		{"behind a trusted proxy", loopback, false},
		{"from an untrusted peer", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			srv := w.consoleWith(t, tokenAuth(t, tokenFile(t, "olga operator "+olgaToken)), func(o *console.Options) {
				o.TrustedProxies = tc.trusted
				o.SignInBurst, o.SignInsPerMinute = 3, 1
			})
			post := func(client, token string) int {
				req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("X-Forwarded-For", "203.0.113.50, "+client)
				resp, err := noRedirects().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			for range 5 {
				post("198.51.100.7", "wrong-0123456789abcdef")
			}
			code := post("198.51.100.8", olgaToken)
			if locked := code == http.StatusTooManyRequests; locked != tc.locked {
				t.Fatalf("the second client's sign-in: %d, locked out %v, want %v", code, locked, tc.locked)
			}
		})
	}
}

// An identity header given twice is refused: behind a proxy that appends,
// the first would be the client's own.
func TestAnIdentityHeaderGivenTwiceIsRefused(t *testing.T) {
	w := newWorld(t)
	srv := w.console(t, console.ProxyAuth{Operators: []string{"olga"}, Trusted: loopback, GroupsHeader: "X-Auth-Request-Groups", OperatorGroup: "ops"})
	for _, hdrs := range [][][2]string{
		{{"X-Auth-Request-User", "olga"}, {"X-Auth-Request-User", "vera"}},
		{{"X-Auth-Request-User", "vera"}, {"X-Auth-Request-Groups", "ops"}, {"X-Auth-Request-Groups", "viewers"}},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/dlq", nil)
		for _, h := range hdrs {
			req.Header.Add(h[0], h[1])
		}
		resp, _ := send(t, req)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", hdrs, resp.StatusCode)
		}
	}
	if code, _ := as(t, "vera", "GET", srv.URL+"/dlq", nil); code != http.StatusOK {
		t.Fatalf("one header: %d", code)
	}
}

// One person's sign-ins end her own oldest sessions, never another's: a
// viewer signing in again and again cannot sign the operators out.
func TestAPersonsSignInsNeverEndAnothersSession(t *testing.T) {
	w := newWorld(t)
	auth, err := console.NewTokenAuth(console.TokenOptions{File: tokenFile(t, "olga operator "+olgaToken, "vera viewer "+veraToken), MaxSessions: 30})
	if err != nil {
		t.Fatal(err)
	}
	h := w.rawConsole(t, auth, nil)
	olga := cookieOf(t, call(h, "10.1.1.1:5000", "POST", "/signin", url.Values{"token": {olgaToken}}, nil))
	var vera []*http.Cookie
	for i := range 100 {
		vera = append(vera, cookieOf(t, call(h, fmt.Sprintf("10.2.%d.%d:5000", i/200, i%200+1), "POST", "/signin", url.Values{"token": {veraToken}}, nil)))
	}
	if code := call(h, "10.1.1.1:5000", "GET", "/dlq", nil, olga).Code; code != http.StatusOK {
		t.Fatalf("olga's session after 100 sign-ins of vera's: %d, want 200", code)
	}
	if code := call(h, "10.2.0.100:5000", "GET", "/dlq", nil, vera[len(vera)-1]).Code; code != http.StatusOK {
		t.Fatalf("vera's newest session: %d", code)
	}
	if code := call(h, "10.2.0.1:5000", "GET", "/dlq", nil, vera[0]).Code; code != http.StatusSeeOther {
		t.Fatalf("vera's oldest session: %d, want ended", code)
	}
}

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

// A redrive's confirmation page spells out what the charge's record makes
// of it ("nothing: FAILED", "not debited again"). If the record changed
// before the POST (reopened: the redrive now debits), the POST must not
// move money the page said would not move.
func TestAttack54ConsoleRedriveActsOnTheRecordItsConfirmationShowed(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-TOCTOU-2", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	entry := w.dlqIDs(t)["CHG-TOCTOU-2"]
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	mustContain(t, "the confirmation", html.UnescapeString(confirm), "nothing until an operator reopens it")
	form := formOf(t, confirm, "confirm-form")

	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, "CHG-TOCTOU-2", "INC-3: ivan's", true, "ivan"); err != nil {
		t.Fatal(err)
	}
	code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", form)
	if _, still := w.dlqIDs(t)["CHG-TOCTOU-2"]; !still {
		t.Fatalf("the redrive moved a message whose record changed since its confirmation (it said nothing is debited; now it is debited under CHG-TOCTOU-2~2): %d\n%s", code, body)
	}
	if code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("the refusal does not say why: %d\n%s", code, body)
	}
	// Confirmed afresh (now it says it debits), it moves.
	_, confirm = as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	mustContain(t, "the new confirmation", confirm, "CHG-TOCTOU-2~2")
	if code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", formOf(t, confirm, "confirm-form")); code != http.StatusOK {
		t.Fatalf("the redrive confirmed afresh: %d\n%s", code, body)
	}
}

// Issue 54 item 2 with the confirmation's seal: a charge id that carries
// its own account is shown masked on the confirmation page (and the form
// carries what the page showed), yet the POST checks the record the body's
// id keys: the redrive of a charge reopened since is still refused, and
// one confirmed afresh moves.
func TestAttack54ConsoleARedriveOfAChargeWhoseIDIsShownMasked(t *testing.T) {
	id := "CHG-" + account
	w := newWorld(t)
	w.declinedOnTheDLQ(t, id, "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	entry := w.dlqIDs(t)[id]
	_, confirm := as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	if strings.Contains(confirm, account) {
		t.Fatalf("the confirmation shows the account in the charge id:\n%s", confirm)
	}
	mustContain(t, "the confirmation", html.UnescapeString(confirm), charge.ShowID(id, account), "nothing until an operator reopens it")
	form := formOf(t, confirm, "confirm-form")
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, id, "INC-4", true, "ivan"); err != nil {
		t.Fatal(err)
	}
	if code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", form); code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("a redrive of a record changed since its confirmation: %d\n%s", code, body)
	}
	if _, still := w.dlqIDs(t)[id]; !still {
		t.Fatal("the message moved although its record changed since the confirmation")
	}
	_, confirm = as(t, "olga", "GET", srv.URL+"/dlq/redrive?id="+url.QueryEscape(entry), nil)
	if code, body := as(t, "olga", "POST", srv.URL+"/dlq/redrive", formOf(t, confirm, "confirm-form")); code != http.StatusOK {
		t.Fatalf("the redrive confirmed afresh: %d\n%s", code, body)
	}
	if _, still := w.dlqIDs(t)[id]; still {
		t.Fatal("the redrive confirmed afresh left the message on the DLQ")
	}
}

// A reopen's confirmation page names the bank key the new attempt is
// debited under; the POST must act on that record, not on whatever it
// became meanwhile (another operator reopened it, the bank declined the
// second attempt too: the POST would make a third attempt under a key
// nobody confirmed, over a decline nobody saw).
func TestAttack54ConsoleReopenActsOnTheRecordItsConfirmationShowed(t *testing.T) {
	w := newWorld(t)
	w.declinedOnTheDLQ(t, "CHG-TOCTOU-1", "INSUFFICIENT_FUNDS", 4200)
	srv := w.console(t, proxyAuth())
	_, confirm := as(t, "olga", "GET", srv.URL+"/charge/reopen?id=CHG-TOCTOU-1", nil)
	mustContain(t, "the confirmation", confirm, "CHG-TOCTOU-1~2")
	form := formOf(t, confirm, "confirm-form")

	// Meanwhile: another operator reopens it with a new attempt, and the
	// bank declines that one too.
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operate.Reopen(t.Context(), g, "CHG-TOCTOU-1", "INC-1: ivan's", true, "ivan"); err != nil {
		t.Fatal(err)
	}
	w.declinedAgain(t, "CHG-TOCTOU-1", "DO_NOT_HONOUR")

	form.Set("reason", "INC-2: customer paid in")
	form.Set("new_attempt", "on")
	code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", form)
	rec, err := w.store.Get(t.Context(), "CHG-TOCTOU-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Generation != 2 || rec.State != driver.StateFailed {
		t.Fatalf("the POST reopened a record its confirmation did not show: now %s generation %d (confirmed: the next key CHG-TOCTOU-1~2); answer %d\n%s",
			rec.State, rec.Generation, code, body)
	}
	if code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("the refusal does not say why: %d\n%s", code, body)
	}
	// Confirmed afresh, it is done.
	_, confirm = as(t, "olga", "GET", srv.URL+"/charge/reopen?id=CHG-TOCTOU-1", nil)
	mustContain(t, "the new confirmation", confirm, "CHG-TOCTOU-1~3")
	form = formOf(t, confirm, "confirm-form")
	form.Set("reason", "INC-2: customer paid in")
	form.Set("new_attempt", "on")
	if code, body := as(t, "olga", "POST", srv.URL+"/charge/reopen", form); code != http.StatusOK {
		t.Fatalf("the reopen confirmed afresh: %d\n%s", code, body)
	}
}
