package console_test

// Adversarial review of the console (commit dcdebd6). Each TestAttack*
// fails on the code as it is and shows one break; TestHeld* pass and
// record an attack that was tried and held.

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	auditpkg "github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// rawConsole is a console whose handler is called directly (so a test
// can choose each request's peer address).
func (w *world) rawConsole(t *testing.T, auth console.Authenticator, set func(*console.Options)) http.Handler {
	t.Helper()
	audit, err := console.OpenAuditLog(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	o := console.Options{Backend: "memory", Queue: w.q, Store: w.store, Auth: auth, Audit: audit, ActionBurst: 3, ActionsPerMinute: 1,
		Logger: slog.New(slog.DiscardHandler)}
	if set != nil {
		set(&o)
	}
	c, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c.Handler()
}

// call sends one request from peer to h.
func call(h http.Handler, peer, method, path string, form url.Values, cookie *http.Cookie) *httptest.ResponseRecorder {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, "http://console.test"+path, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	r.RemoteAddr = peer
	if cookie != nil {
		r.AddCookie(cookie)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func cookieOf(t *testing.T, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	res := rec.Result()
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
		t.Fatalf("sign-in: %d %v\n%s", res.StatusCode, res.Cookies(), rec.Body.String())
	}
	return res.Cookies()[0]
}

// ATTACK 1. The audit trail "fails closed" only while the file it opened
// at start is writable. Delete it (a clean-up job, an operator's rm) or
// move it away (logrotate without copytruncate) and the console goes on
// acting — a reopen is a new debit — with its audit lines written into an
// unlinked inode, or into the rotated file, while the audit file at the
// configured path (what the audit page and the bank's collectors read)
// never receives them.
func TestReviewAuditFileDeletedOrRotatedActionsAuditedIntoNothing(t *testing.T) {
	for _, how := range []string{"deleted", "rotated"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t)
			srv := w.console(t, proxyAuth())
			_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
			switch how {
			case "deleted":
				if err := os.Remove(w.audit); err != nil {
					t.Fatal(err)
				}
			case "rotated": // logrotate's default: rename, then create a new empty file
				if err := os.Rename(w.audit, w.audit+".1"); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(w.audit, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, _ := as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"INC-ROT"}, "new_attempt": {"on"}})
			rec, _ := w.store.Get(t.Context(), w.failed, time.Now())
			b, _ := os.ReadFile(w.audit)
			inTrail := bytes.Contains(b, []byte("INC-ROT"))
			_, auditPage := as(t, "olga", "GET", srv.URL+"/audit", nil)
			if rec.State != driver.StateFailed && !inTrail {
				t.Fatalf("audit file %s: the reopen answered %d and the record is now %s generation %d (a new debit is armed), "+
					"but the audit file at %s has no line for it (%d bytes) and the audit page does not show it (shows INC-ROT: %v)",
					how, code, rec.State, rec.Generation, w.audit, len(b), strings.Contains(auditPage, "INC-ROT"))
			}
		})
	}
}

// ATTACK 2. The token file is re-read only when its mtime, size or mode
// change. A change that keeps all three — a line edited in place to the
// same length (a demotion "operator"→"viewer  ", a rotated token of the
// same length) by a tool that keeps the mtime (cp -p, rsync -t, tar x,
// install -p, touch -r), or two writes in one timestamp tick on a kernel
// with coarse timestamps — is never seen: the demoted operator keeps
// acting and the revoked token keeps signing in, until a restart. The
// stamp ignores ctime and the inode, which no tool can set back.
func TestReviewTokenFileChangeKeepingSizeAndMtimeIsNeverSeen(t *testing.T) {
	w := newWorld(t)
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte(hashLines("olga operator "+olgaToken+"\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(f)
	srv := w.console(t, tokenAuth(t, f))
	olga := signIn(t, srv.URL, olgaToken)

	// Demote olga and rotate her token, same sizes, mtime kept.
	newToken := "olga-ZZZZZZZZZZZZZZZZ" // same length as olgaToken
	if len(newToken) != len(olgaToken) {
		t.Fatal("lengths")
	}
	tmp := f + ".new"
	if err := os.WriteFile(tmp, []byte(hashLines("olga viewer   "+newToken+"\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, st.ModTime(), st.ModTime()); err != nil { // as cp -p / rsync -t / touch -r
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)

	code, page := olga.do("GET", "/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	if code == http.StatusOK {
		code, _ = olga.do("POST", "/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {"after demotion"}})
	}
	resp, err := noRedirects().PostForm(srv.URL+"/signin", url.Values{"token": {olgaToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code == http.StatusOK || resp.StatusCode == http.StatusSeeOther {
		t.Fatalf("the token file now says olga is a viewer with another token, yet her old session reopened a charge (%d, want 401/403) "+
			"and her revoked token still signs in (%d, want 401)", code, resp.StatusCode)
	}
}

// ATTACK 3. The per-person action limit (what stops a stolen session or a
// rogue operator from reopening — debiting — charges in bulk) lives in the
// same LRU as the sign-in limiters of client addresses. Anyone who can
// reach the sign-in form, with no token at all, evicts it by posting bad
// tokens from MaxClients addresses (one IPv6 /64 has 2^64; behind the
// trusted TLS proxy the X-Forwarded-For it appends is the client's).
func TestReviewActionLimitEvictedBySignInFloodFromManyAddresses(t *testing.T) {
	w := newWorld(t)
	h := w.rawConsole(t, tokenAuth(t, tokenFile(t, "olga operator "+olgaToken)), nil)
	const olgaPeer = "10.1.1.1:5000"
	cookie := cookieOf(t, call(h, olgaPeer, "POST", "/signin", url.Values{"token": {olgaToken}}, nil))
	page := call(h, olgaPeer, "GET", "/dlq/redrive?id=x", nil, cookie).Body.String()
	if !strings.Contains(page, `name="csrf"`) {
		page = call(h, olgaPeer, "GET", "/", nil, cookie).Body.String()
	}
	csrf := csrfOf(t, page)
	act := func() int {
		return call(h, olgaPeer, "POST", "/dlq/redrive", url.Values{"id": {"no-such-entry"}, "csrf": {csrf}}, cookie).Code
	}
	for i := range 3 { // the burst
		if code := act(); code != http.StatusNotFound {
			t.Fatalf("action %d: %d", i, code)
		}
	}
	if code := act(); code != http.StatusTooManyRequests {
		t.Fatalf("past the burst: %d, want 429", code)
	}
	// The flood: one bad sign-in from each of 10,000 addresses of one /64.
	for i := range 10_000 {
		call(h, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "POST", "/signin", url.Values{"token": {"not-a-token-0123456789"}}, nil)
	}
	allowed := 0
	for range 3 {
		if act() == http.StatusNotFound {
			allowed++
		}
	}
	if allowed > 0 {
		t.Fatalf("olga was rate-limited (1 action a minute, burst 3, all used); after 10,000 anonymous bad sign-ins from one IPv6 /64 "+
			"her limiter was evicted and %d more actions went through at once", allowed)
	}
}

// ATTACK 4. The sign-in limit is per exact client address: an attacker
// with an IPv6 /64 (every home line and cloud VM has one) guesses tokens
// without limit, one guess per address.
func TestReviewSignInLimitIsPerAddressSoAnIPv6PrefixGuessesWithoutLimit(t *testing.T) {
	w := newWorld(t)
	h := w.rawConsole(t, tokenAuth(t, tokenFile(t, "olga operator "+olgaToken)), nil)
	limited := 0
	const guesses = 1000
	for i := range guesses {
		if call(h, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "POST", "/signin", url.Values{"token": {fmt.Sprintf("guess-%016d", i)}}, nil).Code == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited == 0 {
		t.Fatalf("%d token guesses from one IPv6 /64 within a second: none rate-limited (the limit is 10 a minute per address)", guesses)
	}
}

// ATTACK 5. Sessions are one LRU for everyone: any token holder — a
// viewer — who signs in MaxSessions times (scripted; the sign-in limit is
// per address, see ATTACK 4) ends every operator's session, in the middle
// of a month-end incident, and can keep them signed out.
func TestReviewAViewerSigningInRepeatedlyEndsTheOperatorsSessions(t *testing.T) {
	w := newWorld(t)
	if d, err := os.MkdirTemp("/dev/shm", "audit"); err == nil { // fsync is cheap there: the point is the logic, not the disk
		t.Cleanup(func() { os.RemoveAll(d) })
		w.audit = filepath.Join(d, "audit.jsonl")
	}
	auth := tokenAuth(t, tokenFile(t, "olga operator "+olgaToken, "vera viewer "+veraToken))
	h := w.rawConsole(t, auth, nil)
	olga := cookieOf(t, call(h, "10.1.1.1:5000", "POST", "/signin", url.Values{"token": {olgaToken}}, nil))
	if code := call(h, "10.1.1.1:5000", "GET", "/dlq", nil, olga).Code; code != http.StatusOK {
		t.Fatalf("olga: %d", code)
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := range 10_000 { // the default MaxSessions
		if time.Now().After(deadline) {
			t.Skip("too slow here")
		}
		call(h, fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "POST", "/signin", url.Values{"token": {veraToken}}, nil)
	}
	if code := call(h, "10.1.1.1:5000", "GET", "/dlq", nil, olga).Code; code != http.StatusOK {
		t.Fatalf("after viewer vera signed in 10,000 times, operator olga's session is gone (%d, want 200): a viewer signs every operator out", code)
	}
}

// ATTACK 7. The audit page reads the whole audit file under the audit
// trail's mutex. The file only grows (a year of actions and minute-by-
// minute refusal summaries); while any signed-in viewer's page view scans
// it, every action's 'requested' line waits — and so does the action —
// and a viewer who keeps reloading /audit stalls every operator.
func TestReviewAuditPageScanHoldsTheAuditLockAndStallsActions(t *testing.T) {
	w := newWorld(t)
	// ~60 MB of old trail.
	line := []byte(`{"at":"2026-01-01T00:00:00Z","operator":"olga","role":"operator","action":"signin","result":"refused","detail":"` + strings.Repeat("x", 180) + `","remote":"198.51.100.7"}` + "\n")
	big := bytes.Repeat(line, 60<<20/len(line))
	if err := os.WriteFile(w.audit, big, 0o600); err != nil {
		t.Fatal(err)
	}
	audit, err := console.OpenAuditLog(w.audit)
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	// The page shows the newest entries of a trail of months, from its
	// end; that it takes no lock an action needs is
	// TestRecentTakesNoLockAnActionNeeds (a wall-clock bound here was
	// flaky on a loaded machine).
	if _, err := audit.Append(console.AuditEntry{Operator: "olga", Action: "reopen", Result: "requested"}); err != nil {
		t.Fatal(err)
	}
	got, err := audit.Recent(200, auditpkg.Filter{})
	if err != nil || len(got) == 0 || got[0].Action != "reopen" || got[0].Operator != "olga" {
		t.Fatalf("the audit page over a %d MB trail: %d entries, newest %+v (%v); want the action just appended first", len(big)>>20, len(got), got, err)
	}
}

// HELD: attacks tried that the console withstands (these pass).
func TestReviewHeldCrossSiteAndCSRFVariants(t *testing.T) {
	w := newWorld(t)
	auth := tokenAuth(t, tokenFile(t, "olga operator "+olgaToken, "vera viewer "+veraToken, "ivan operator ivan-0123456789abcdef"))
	srv := w.console(t, auth)
	olga, vera, ivan := signIn(t, srv.URL, olgaToken), signIn(t, srv.URL, veraToken), signIn(t, srv.URL, "ivan-0123456789abcdef")
	_, op := olga.do("GET", "/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	_, vp := vera.do("GET", "/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	_, ip := ivan.do("GET", "/", nil)
	oc, vc, ic := csrfOf(t, op), csrfOf(t, vp), csrfOf(t, ip)
	post := func(b *browser, path string, form url.Values, query string, hdr ...string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+path+query, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		req.AddCookie(b.cookie)
		resp, err := noRedirects().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	f := func(csrf string) url.Values { return url.Values{"id": {w.failed}, "csrf": {csrf}, "reason": {"held"}} }
	for name, code := range map[string]int{
		"viewer's CSRF by an operator": post(olga, "/charge/reopen", f(vc), ""),
		"another operator's CSRF":      post(olga, "/charge/reopen", f(ic), ""),
		"CSRF in the query string":     post(olga, "/charge/reopen", url.Values{"id": {w.failed}, "reason": {"held"}}, "?csrf="+url.QueryEscape(oc)),
		"Sec-Fetch-Site: same-site":    post(olga, "/charge/reopen", f(oc), "", "Sec-Fetch-Site", "same-site"),
		"Sec-Fetch-Site: cross-site":   post(olga, "/charge/reopen", f(oc), "", "Sec-Fetch-Site", "cross-site"),
		"Origin: null":                 post(olga, "/charge/reopen", f(oc), "", "Origin", "null"),
		"Origin: sibling subdomain":    post(olga, "/charge/reopen", f(oc), "", "Origin", "https://evil.console.test"),
		"signin from another site":     post(olga, "/signin", url.Values{"token": {olgaToken}}, "", "Sec-Fetch-Site", "cross-site"),
		"method override header on GET": func() int {
			c, _ := olga.do("GET", "/charge/reopen?id="+url.QueryEscape(w.failed)+"&_method=POST&csrf="+url.QueryEscape(oc)+"&reason=x", nil)
			return c
		}(),
	} {
		if code == http.StatusOK && name == "method override header on GET" {
			// the confirmation page; the record must not have moved
			continue
		}
		if code < 400 {
			t.Errorf("%s: %d, want refused", name, code)
		}
	}
	if rec, _ := w.store.Get(t.Context(), w.failed, time.Now()); rec.State != driver.StateFailed {
		t.Fatalf("the record moved: %s", rec.State)
	}
}

// HELD: script in a DLQ body, a reason's detail, a charge id, the proxy's
// user name and an operator's reason is escaped everywhere it is shown.
func TestReviewHeldNoScriptFromOutsideReachesAPage(t *testing.T) {
	w := newWorld(t)
	const x = `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	w.deadLetter(t, []byte(`{"chargeId":"`+strings.ReplaceAll(x, `"`, `\"`)+`","accountId":"`+account+`","note":"</pre>`+strings.ReplaceAll(x, `"`, `\"`)+`"}`),
		queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: x})
	srv := w.console(t, console.ProxyAuth{Operators: []string{"olga", "<b>olga</b>"}, Trusted: loopback})
	_, page := as(t, "<b>olga</b>", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	as(t, "<b>olga</b>", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrfOf(t, page)}, "reason": {x}})
	var pages []string
	for _, p := range []string{"/dlq", "/audit", "/charge?id=" + url.QueryEscape(w.failed), "/charge?id=" + url.QueryEscape(x)} {
		_, b := as(t, "<b>olga</b>", "GET", srv.URL+p, nil)
		pages = append(pages, b)
	}
	for id := range w.dlqIDs(t) {
		_, b := as(t, "olga", "GET", srv.URL+"/dlq/entry?id="+url.QueryEscape(w.dlqIDs(t)[id]), nil)
		pages = append(pages, b)
	}
	for _, b := range pages {
		if strings.Contains(b, "<script>alert") || strings.Contains(b, "<img src=x") || strings.Contains(b, "<b>olga</b>") {
			t.Fatalf("unescaped markup in a page:\n%s", b)
		}
	}
}

// HELD: a double-submitted (10 at once) reopen with a new attempt opens one
// new generation, not ten.
func TestReviewHeldADoubleSubmittedReopenOpensOneGeneration(t *testing.T) {
	w := newWorld(t)
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) { o.ActionBurst, o.ActionsPerMinute = 100, 100 })
	_, page := as(t, "olga", "GET", srv.URL+"/charge/reopen?id="+url.QueryEscape(w.failed), nil)
	csrf := csrfOf(t, page)
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for i := range codes {
		wg.Go(func() {
			codes[i], _ = as(t, "olga", "POST", srv.URL+"/charge/reopen", url.Values{"id": {w.failed}, "csrf": {csrf}, "reason": {"dbl"}, "new_attempt": {"on"}})
		})
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == http.StatusOK {
			ok++
		}
	}
	rec, _ := w.store.Get(t.Context(), w.failed, time.Now())
	if ok != 1 || rec.Generation != 2 {
		t.Fatalf("10 concurrent reopens: %d succeeded, generation %d (codes %v)", ok, rec.Generation, codes)
	}
}

// ATTACK 8 (low). Two names may share one token: the file is accepted
// (a second line for the same *name* is refused, the same *token* is not),
// and whoever uses it signs in as the last line's name — olga's actions
// go into the audit trail as vera's, and revoking "vera" ends olga too.
func TestReviewTwoNamesWithOneTokenAreAcceptedAndMisattributed(t *testing.T) {
	f := tokenFile(t, "olga operator "+olgaToken, "vera operator "+olgaToken)
	if _, err := console.NewTokenAuth(console.TokenOptions{File: f}); err == nil {
		w := newWorld(t)
		srv := w.console(t, tokenAuth(t, f))
		olga := signIn(t, srv.URL, olgaToken)
		_, page := olga.do("GET", "/", nil)
		t.Fatalf("a token file giving one token to olga and vera was accepted; olga's sign-in is: %q",
			page[strings.Index(page, `id="who"`):][:40])
	}
}

// ATTACK 6. A DLQ body is masked only at its accountId when it has one:
// every other account number in it is shown in clear. A producer whose
// schema grew a field (a debtor / beneficiary account) sends exactly such
// messages — the parser refuses unknown fields, so every one of them is on
// the DLQ, in the console, for every viewer. The same for an accountId
// written with a JSON escape (the decoded value is what is searched for).
func TestReviewDLQBodyShowsOtherAccountNumbersInClear(t *testing.T) {
	w := newWorld(t)
	const other = "998877665544332211"
	w.deadLetter(t, []byte(`{"schemaVersion":1,"chargeId":"CHG-EXTRA-1","accountId":"`+account+`","debtorAccount":"`+other+`","amount":{"minor":100,"currency":"INR"}}`),
		queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: "unknown field"})
	w.deadLetter(t, []byte(`{"schemaVersion":1,"chargeId":"CHG-ESC-1","accountId":"0012345678\u0039\u0030"}`),
		queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: "escaped"})
	srv := w.console(t, proxyAuth())
	ids := w.dlqIDs(t)
	var leaks []string
	for charge, leak := range map[string]string{"CHG-EXTRA-1": other, "CHG-ESC-1": `0012345678\u0039\u0030`} {
		_, page := as(t, "vera", "GET", srv.URL+"/dlq/entry?id="+url.QueryEscape(ids[charge]), nil)
		if strings.Contains(page, leak) {
			leaks = append(leaks, charge+": "+leak)
		}
	}
	if len(leaks) > 0 {
		t.Fatalf("a viewer's DLQ entry page shows account numbers in clear: %v", leaks)
	}
}
