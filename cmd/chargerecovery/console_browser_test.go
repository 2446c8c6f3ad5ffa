package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// chromium finds Debian's headless browser: in CI its absence fails the
// test, elsewhere it skips saying how to install it.
// consoleUp waits (20 s at most) until the console at base answers its
// sign-in page with 200.
func consoleUp(t *testing.T, base string) {
	t.Helper()
	waitUntil(t, "the console to answer", 20*time.Second, func() bool {
		resp, err := http.Get(base + "/signin")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
}

func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("IC_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (.ci/run installs Debian's chromium package)")
	}
	t.Skip("chromium is not installed: apt-get install chromium (or set IC_CHROMIUM)")
	return ""
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// screenshotDir is where the browser test writes its pictures:
// $IC_SCREENSHOT_DIR, or a temporary directory it names.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("IC_SCREENSHOT_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "console-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTheConsoleInAHeadlessBrowser drives the console served by `serve
// --console` in Chromium, against the embedded backend with charges in
// every state: DONE (debited, one of them a notification that failed),
// FAILED by a decline, a conflict and a malformed message on the DLQ, a
// charge dead-lettered after too many receives, and a claim stuck past its
// lease. The overview's numbers are status --json's; a viewer's action and
// an action without the CSRF token are refused and change nothing; the
// operator's redrive from the page ends in one debit and a DONE record;
// the overview refreshes without a reload; every page is screenshotted.
func TestTheConsoleInAHeadlessBrowser(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	shots := screenshotDir(t)
	t.Logf("screenshots: %s", shots)

	// The bank declines one account; the notification webhook fails for
	// charges whose id says so.
	const declined = "009999999999"
	ledger := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{declined: "ACCOUNT_FROZEN"}})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "NOTIFY-DOWN") {
			http.Error(w, "gateway down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer hook.Close()

	const viewerToken, operatorToken = "vera-viewer-token-0123456789", "olga-operator-token-0123456789"
	tokens := tokenFile(t, dir, console.TokenLine("vera", console.Viewer, viewerToken, ""), console.TokenLine("olga", console.Operator, operatorToken, ""))
	consoleAddr := freeAddr(t)
	audit := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "ic.db"), "IC_COREBANK_URL": bank.URL,
		"IC_NOTIFY": "webhook", "IC_NOTIFY_URL": hook.URL, "IC_NOTIFY_TIMEOUT": "1s",
		"IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn",
		"IC_CONSOLE": "true", "IC_CONSOLE_ADDR": consoleAddr, "IC_CONSOLE_AUTH": "token", "IC_CONSOLE_TOKEN_FILE": tokens,
		"IC_CONSOLE_AUDIT_FILE": audit, "IC_CONSOLE_REFRESH": "1s"}
	b, err := backend.Open(t.Context(), *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	event := func(id, acct string, minor int64) []byte {
		body, err := charge.MarshalEvent(charge.Charge{ID: id, AccountID: acct, Amount: charge.Money{Minor: minor, Currency: "INR"},
			Type: charge.LockerRent, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	// The charge an outage dead-lettered (max receives): no record, so a
	// redrive debits it.
	const redriven = "CHG-2026/11.REDRIVE-1"
	deadLetter(t, b.Queue, event(redriven, "001234567801", 4100), queue.Reason{Code: queue.CodeMaxReceives, Detail: "received 10 times during a bank outage"})
	// A claim whose worker died: IN_PROGRESS past its lease, no message.
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(ctx, "CHG-STUCK-1", "fp"); err != nil {
		t.Fatal(err)
	}
	// What serve gets: three charges (one sent twice), one for the closed
	// account, one whose notice fails, a conflict and a malformed body.
	out := []queue.Outgoing{{Body: event("CHG-OK-1", "001234567811", 2500)}, {Body: event("CHG-OK-1", "001234567811", 2500)},
		{Body: event("CHG-OK-2", "001234567812", 2600)}, {Body: event("CHG-OK-3", "001234567813", 2700)},
		{Body: event("CHG-DECLINED-1", declined, 2800)}, {Body: event("CHG-NOTIFY-DOWN-1", "001234567814", 2900)},
		{Body: []byte(`{"schemaVersion":1,"chargeId":"CHG-BAD-1","accountId":"001234567815","amount":{"minor":25.5,"currency":"INR"}}`)}}
	if _, err := b.Queue.SendBatch(ctx, out); err != nil {
		t.Fatal(err)
	}
	serve := child(t, env, "serve")
	waitUntil(t, "serve to finish the first charges", 60*time.Second, func() bool {
		rec, err := b.Store.Get(ctx, "CHG-OK-1", time.Now())
		d, derr := b.Queue.Depth(ctx)
		return err == nil && rec.State == driver.StateDone && derr == nil && d.Waiting+d.InFlight == 0 && d.DLQ >= 3
	})
	// The conflict comes after its charge is DONE.
	if _, err := b.Queue.Send(ctx, event("CHG-OK-2", "001234567812", 9900), nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the conflict to be dead-lettered", 30*time.Second, func() bool {
		d, err := b.Queue.Depth(ctx)
		return err == nil && d.DLQ == 4 && d.Waiting+d.InFlight == 0
	})
	time.Sleep(1500 * time.Millisecond) // the stuck claim's lease passes (and its margin)

	st := runCmd(ctx, env, "status", "--json", "--metrics-url", "")
	if st.code != 0 {
		t.Fatalf("status: %d %s", st.code, st.stderr)
	}
	var want status.Report
	if err := json.Unmarshal([]byte(st.stdout), &want); err != nil {
		t.Fatal(err)
	}

	// The browser.
	bctx := startChromium(t, exe, dir, quietChromium...) // the steps get a deadline
	base := "http://" + consoleAddr
	// Each step has 30 s; a step that fails leaves a picture of the page.
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			if png, perr := chromedp.Run(bctx, chromedp.FullScreenshot(100)); perr == nil {
				_ = os.WriteFile(filepath.Join(shots, "failed.png"), png, 0o644)
			}
			loc, _ := chromedp.Run(bctx, chromedp.Location())
			t.Fatalf("browser, %s (at %s): %v; the page is in %s", what, loc, err, filepath.Join(shots, "failed.png"))
		}
	}
	shotOf := func(ctx context.Context, name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot := func(name string) { t.Helper(); shotOf(bctx, name) }
	textIn := func(ctx context.Context, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	text := func(sel string) string { t.Helper(); return textIn(bctx, sel) }
	signIn := func(token string) {
		t.Helper()
		run("sign in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#waiting")))
	}
	consoleUp(t, base)

	// Not signed in: the sign-in page, nothing else.
	run("anonymous visit", chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(chromedp.CSS("#token")))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(loc, "/signin") {
		t.Fatalf("an anonymous visit to /dlq ended at %s, want /signin", loc)
	}
	shot("signin")

	// A viewer: the overview's numbers are status --json's.
	signIn(viewerToken)
	shot("overview")
	num := func(sel string) int {
		t.Helper()
		n, err := strconv.Atoi(text(sel))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return n
	}
	checks := map[string][2]int{
		"waiting": {num("#waiting"), want.Queue.Waiting}, "in flight": {num("#inflight"), want.Queue.InFlight},
		"dlq": {num("#dlq"), want.Queue.DLQ}, "stuck": {num("#stuck"), want.Stuck},
		"DONE": {num("#rec-DONE"), want.Records[driver.StateDone]}, "FAILED": {num("#rec-FAILED"), want.Records[driver.StateFailed]},
		"IN_PROGRESS": {num("#rec-IN_PROGRESS"), want.Records[driver.StateInProgress]},
	}
	for code, n := range want.DLQByCode {
		checks["dlq "+string(code)] = [2]int{num("#dlq-" + string(code)), n}
	}
	for what, got := range checks {
		if got[0] != got[1] {
			t.Errorf("overview %s = %d, status --json says %d", what, got[0], got[1])
		}
	}
	if want.Queue.DLQ != 4 || want.Stuck != 1 || want.Records[driver.StateDone] != 4 || want.Records[driver.StateFailed] != 1 {
		t.Errorf("the world is not as built: %+v", want)
	}
	if len(want.DLQByCode) != 4 {
		t.Errorf("DLQ codes %v, want max_receives, debit_failed, conflict, invalid", want.DLQByCode)
	}

	// The DLQ and one entry (masked), the stuck list, a charge.
	run("dlq", chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(chromedp.CSS("#dlq-table")))
	shot("dlq")
	html, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	for _, acct := range []string{declined, "001234567801", "001234567812", "001234567815"} {
		if strings.Contains(html, acct) {
			t.Errorf("the DLQ page shows account %s in full", acct)
		}
	}
	// The month-end columns: decline code or reason, amount, masked
	// account, generation, what happens next.
	if row := text(`#dlq-table tr[data-charge="CHG-DECLINED-1"]`); !containsAll(row, "ACCOUNT_FROZEN", "INR 28.00", "9999", "reopens it with a new attempt") {
		t.Errorf("the DLQ page's row of the declined charge: %q", row)
	}
	run("records", chromedp.Navigate(base+"/records?state=FAILED"), chromedp.WaitVisible(chromedp.CSS("#records")))
	shot("records-failed")
	if head := text("#records thead"); !containsAll(head, "decline / reason", "amount", "account", "generation", "what happens next") {
		t.Errorf("the records page's columns: %q", head)
	}
	if row := text("#records tbody"); !containsAll(row, "CHG-DECLINED-1", "ACCOUNT_FROZEN", "INR 28.00", "****9999", "reopens it with a new attempt") ||
		strings.Contains(row, "not held: the record is final") || strings.Contains(row, "Reopen…") {
		t.Errorf("the records page's row of the declined charge (a viewer: no action): %q", row)
	}
	run("filter", chromedp.Navigate(base+"/dlq?reason=max_receives"), chromedp.WaitVisible(chromedp.CSS("#dlq-table")))
	if got := text("#dlq-total"); !strings.HasPrefix(got, "1 entry") {
		t.Fatalf("filtered by max_receives: %q", got)
	}
	run("open the entry", chromedp.Click(chromedp.CSS(`#dlq-table tbody a`)), chromedp.WaitVisible(chromedp.CSS("#body")))
	shot("dlq-entry")
	if b := text("#body"); strings.Contains(b, "001234567801") || !strings.Contains(b, redriven) {
		t.Errorf("the entry's body is not masked or not there: %s", b)
	}
	run("stuck", chromedp.Navigate(base+"/stuck"), chromedp.WaitVisible(chromedp.CSS("#stuck-total")))
	shot("stuck")
	run("a declined charge", chromedp.Navigate(base+"/charge?id=CHG-DECLINED-1"), chromedp.WaitVisible(chromedp.CSS("#record")))
	shot("charge-declined")
	if s := text("#state"); s != "FAILED" {
		t.Errorf("the declined charge's page says %q", s)
	}

	// A viewer's action is refused (the page offers none; the form, sent
	// by hand, is refused by the server).
	entryID := dlqIDOf(t, b, redriven)
	run("viewer confirm", chromedp.Navigate(base+"/dlq/redrive?id="+url.QueryEscape(entryID)), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#title")))
	shot("viewer-refused")
	if got := text("#title"); got != "Refused" || !strings.Contains(text("#message"), "viewer") {
		t.Fatalf("a viewer's redrive: %q %q", got, text("#message"))
	}
	if d, _ := b.Queue.Depth(ctx); d.DLQ != 4 {
		t.Fatalf("after a viewer's refused redrive the DLQ has %d", d.DLQ)
	}

	// The operator.
	run("sign out", chromedp.Click(chromedp.CSS("button.link")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(operatorToken)
	if r := text("#role"); r != "operator" {
		t.Fatalf("signed in as %q", r)
	}
	// Without the CSRF token: refused.
	run("no csrf", chromedp.Navigate(base+"/dlq/redrive?id="+url.QueryEscape(entryID)), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.querySelector('#confirm-form input[name=csrf]').remove(); true`)(ctx, tg)
			return err
		}),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#title")))
	shot("csrf-refused")
	if got := text("#title"); got != "Refused" || !strings.Contains(text("#message"), "CSRF") {
		t.Fatalf("a redrive without the CSRF token: %q %q", got, text("#message"))
	}
	if d, _ := b.Queue.Depth(ctx); d.DLQ != 4 {
		t.Fatalf("after a redrive without CSRF the DLQ has %d", d.DLQ)
	}
	// The overview, left open, refreshes without a reload when the DLQ
	// shrinks.
	run("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#dlq")))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](`window.__notReloaded = "yes"; "yes"`)); err != nil {
		t.Fatal(err)
	}

	// The redrive, from a second tab, with the confirmation.
	tab, cancelTab := chromedp.NewContext(bctx)
	defer cancelTab()
	if err := chromedp.Do(tab, chromedp.Navigate(base+"/dlq/entry?id="+url.QueryEscape(entryID)), chromedp.WaitVisible(chromedp.CSS("#redrive")),
		chromedp.Click(chromedp.CSS("#redrive")), chromedp.WaitVisible(chromedp.CSS("#confirm"))); err != nil {
		t.Fatal(err)
	}
	shotOf(tab, "redrive-confirm")
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#title"))); err != nil {
		t.Fatal(err)
	}
	if title := textIn(tab, "#title"); title != "Redriven" {
		t.Fatalf("the operator's redrive: %q %q", title, textIn(tab, "#message"))
	}
	waitUntil(t, "the redriven charge to be debited", 30*time.Second, func() bool {
		rec, err := b.Store.Get(ctx, redriven, time.Now())
		return err == nil && rec.State == driver.StateDone
	})
	if n := ledger.PostingsByKey()[redriven]; n != 1 {
		t.Fatalf("the redriven charge was posted %d times, want once", n)
	}
	// The overview tab saw it, without a reload.
	waitUntil(t, "the overview to refresh in place", 15*time.Second, func() bool {
		dlq, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#dlq")))
		still, err2 := chromedp.Run(bctx, chromedp.Evaluate[string](`window.__notReloaded || "reloaded"`))
		return err == nil && err2 == nil && strings.TrimSpace(dlq) == "3" && still == "yes"
	})
	shot("overview-after-redrive")
	if err := chromedp.Do(tab, chromedp.Navigate(base+"/charge?id="+url.QueryEscape(redriven)), chromedp.WaitVisible(chromedp.CSS("#record"))); err != nil {
		t.Fatal(err)
	}
	shotOf(tab, "charge-redriven")

	// Reopen the declined charge with a reason: FAILED → reopened, in the
	// record's trail and the console's.
	run("reopen", chromedp.Navigate(base+"/charge?id=CHG-DECLINED-1"), chromedp.WaitVisible(chromedp.CSS("#reopen")),
		chromedp.Click(chromedp.CSS("#reopen")), chromedp.WaitVisible(chromedp.CSS("#reason")),
		chromedp.SendKeys(chromedp.CSS("#reason"), "INC-4711: account reopened by the branch"))
	shot("reopen-confirm")
	run("confirm reopen", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#title")))
	if got := text("#title"); got != "Reopened" {
		t.Fatalf("reopen: %q %q", got, text("#message"))
	}
	rec, err := b.Store.Get(ctx, "CHG-DECLINED-1", time.Now())
	if err != nil || rec.Reopens != 1 || len(rec.History) == 0 || !strings.Contains(rec.History[len(rec.History)-1], "olga (console)") {
		t.Fatalf("the reopened record: %+v %v", rec, err)
	}
	// Reopened while its message waits on the DLQ: no delivery comes, and
	// the Stuck page says so and offers the redrive (its confirmation,
	// which posts with the CSRF token); the dead worker's claim is
	// reclaimed by its next delivery.
	run("stuck after the reopen", chromedp.Navigate(base+"/stuck"), chromedp.WaitVisible(chromedp.CSS(`#stuck tr[data-charge="CHG-DECLINED-1"]`)))
	shot("stuck-reopened")
	if head := text("#stuck thead"); !containsAll(head, "decline / reason", "amount", "account", "generation", "what happens next") {
		t.Errorf("the Stuck page's columns: %q", head)
	}
	if row := text(`#stuck tr[data-charge="CHG-DECLINED-1"]`); !containsAll(row, "its message is on the DLQ: no delivery comes until it is redriven",
		"reopened: INC-4711", "ACCOUNT_FROZEN", "INR 28.00", "****9999", "Redrive…") || strings.Contains(row, "the next delivery reclaims it") {
		t.Errorf("the Stuck page's row of the reopened charge: %q", row)
	}
	if row := text(`#stuck tr[data-charge="CHG-STUCK-1"]`); !strings.Contains(row, "the next delivery reclaims it") || strings.Contains(row, "Redrive") {
		t.Errorf("the Stuck page's row of the dead worker's claim: %q", row)
	}
	run("the stuck page's redrive", chromedp.Click(chromedp.CSS(`#stuck tr[data-charge="CHG-DECLINED-1"] a.button`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	if m := text("#money"); !containsAll(m, "INR 28.00", "no delivery comes until it is redriven", "debited under bank key CHG-DECLINED-1~2") {
		t.Errorf("the redrive's confirmation does not spell out the money: %q", m)
	}
	run("audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(chromedp.CSS("#audit")))
	shot("audit")
	trail := text("#audit")
	for _, want := range []string{"vera (viewer)", "olga (operator)", "redrive", "moved", "reopen", "refused"} {
		if !strings.Contains(trail, want) {
			t.Errorf("the audit page lacks %q:\n%s", want, trail)
		}
	}
	stopAll(t, serve)
	b2, _ := os.ReadFile(audit)
	for _, acct := range []string{declined, "001234567801"} {
		if strings.Contains(string(b2), acct) {
			t.Errorf("the audit file holds account %s", acct)
		}
	}
}

// containsAll reports whether s holds every one of want.
func containsAll(s string, want ...string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// dlqIDOf is the id of the DLQ entry of chargeID.
func dlqIDOf(t *testing.T, b *backend.Backend, chargeID string) string {
	t.Helper()
	var id string
	var mu sync.Mutex
	_, err := b.Queue.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Force: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) {
		if strings.Contains(string(e.Body), `"`+chargeID+`"`) {
			mu.Lock()
			id = e.ID
			mu.Unlock()
		}
	}})
	if err != nil || id == "" {
		t.Fatalf("no DLQ entry for %s: %v", chargeID, err)
	}
	return id
}

// TestOverviewScreenshotForTheDocs takes docs/operations/console-overview.png:
// serve --console on the embedded backend, a bank answering in about 40 ms,
// bursts of charges every few seconds (some declined, some malformed, some
// conflicts), for a minute and a half; then the overview in Chromium. It
// runs only when IC_DOCS_SCREENSHOT names the file to write:
//
//	IC_DOCS_SCREENSHOT=$PWD/docs/operations/console-overview.png go test ./cmd/chargerecovery -run TestOverviewScreenshotForTheDocs
func TestOverviewScreenshotForTheDocs(t *testing.T) {
	out := os.Getenv("IC_DOCS_SCREENSHOT")
	if out == "" {
		t.Skip("IC_DOCS_SCREENSHOT is not set (the file to write the docs' overview picture to)")
	}
	exe := chromium(t)
	dir := t.TempDir()
	const declined = "009999999999"
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 40 * time.Millisecond, DeclineAccounts: map[string]string{declined: "INSUFFICIENT_FUNDS"}})
	bankURL := simBank(t, ledger)
	const token = "olga-operator-token-0123456789"
	tokens := tokenFile(t, dir, console.TokenLine("olga", console.Operator, token, ""))
	consoleAddr := freeAddr(t)
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "ic.db"), "IC_COREBANK_URL": bankURL,
		"IC_POLL_WAIT": "1s", "IC_VISIBILITY": "30s", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn", "IC_CONCURRENCY": "2",
		"IC_CONSOLE": "true", "IC_CONSOLE_ADDR": consoleAddr, "IC_CONSOLE_AUTH": "token", "IC_CONSOLE_TOKEN_FILE": tokens,
		"IC_CONSOLE_AUDIT_FILE": filepath.Join(dir, "audit.jsonl"), "IC_CONSOLE_REFRESH": "2s"}
	b, err := backend.Open(t.Context(), *backendFor(env), 30*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	child(t, env, "serve")
	n := 0
	burst := func(size int) {
		var batch []queue.Outgoing
		for range size {
			n++
			acct := fmt.Sprintf("0012345%05d", n)
			if n%37 == 0 {
				acct = declined
			}
			c := charge.Charge{ID: fmt.Sprintf("CHG-2026-11-%06d", n), AccountID: acct, Amount: charge.Money{Minor: 2500 + int64(n%7)*100, Currency: "INR"},
				Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
			body, err := charge.MarshalEvent(c)
			if err != nil {
				t.Fatal(err)
			}
			if n%53 == 0 {
				body = []byte(`{"schemaVersion":1,"chargeId":"CHG-BAD-` + fmt.Sprint(n) + `","amount":{"minor":25.5}}`)
			}
			batch = append(batch, queue.Outgoing{Body: body})
			if len(batch) == 10 {
				if _, err := b.Queue.SendBatch(ctx, batch); err != nil {
					t.Fatal(err)
				}
				batch = nil
			}
		}
		if len(batch) > 0 {
			if _, err := b.Queue.SendBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := "http://" + consoleAddr
	consoleUp(t, base)
	for i := range 9 {
		burst([]int{120, 300, 80, 400, 200, 60, 350, 150, 250}[i])
		time.Sleep(10 * time.Second)
	}
	burst(400) // the picture mid-burst: a backlog draining
	time.Sleep(5 * time.Second)
	bctx := startChromium(t, exe, dir)
	sctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#chart-debited"))); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d charges sent; the overview is in %s", n, out)
}

// browser is a headless Chromium for one test, with steps that leave a
// picture of the page when they fail.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newBrowser(t *testing.T, dir string) *browser {
	t.Helper()
	bctx := startChromium(t, chromium(t), dir, quietChromium...)
	return &browser{t: t, ctx: bctx, shots: screenshotDir(t)}
}

// quietChromium are the flags that keep a test's Chromium off the network
// (no QUIC, no component updates, no sync).
var quietChromium = []chromedp.ExecAllocatorOption{chromedp.Flag("disable-quic", true),
	chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true)}

// startChromium starts Chromium (exe, its profile in dir, 1280×900, no
// sandbox, no GPU, no first-run page, and opts) for the test's duration
// and returns its context; the first run, on a context without a deadline
// (a deadline there would stop the browser), starts it.
func startChromium(t *testing.T, exe, dir string, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts = append(append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(dir, "chromium")), chromedp.Flag("no-first-run", true), chromedp.WindowSize(1280, 900)), opts...)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	sctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		if png, perr := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)); perr == nil {
			_ = os.WriteFile(filepath.Join(b.shots, "failed.png"), png, 0o644)
		}
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		b.t.Fatalf("browser, %s (at %s): %v; the page is in %s", what, loc, err, filepath.Join(b.shots, "failed.png"))
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestFourEyesInAHeadlessBrowser: an outage dead-lettered twelve charges;
// the command line redrives one (its line in the same audit trail); olga
// proposes a bulk redrive of the other eleven in the console, sees exactly
// what it touches, is refused when she approves it herself; ivan approves
// it; it runs in batches of four with its progress on the page; each
// charge is debited once.
func TestFourEyesInAHeadlessBrowser(t *testing.T) {
	dir := t.TempDir()
	br := newBrowser(t, dir)
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	tokens, own := writeTokens(t, dir, "olga:operator", "ivan:operator")
	consoleAddr := freeAddr(t)
	auditFile := filepath.Join(dir, "audit.jsonl")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "ic.db"), "IC_COREBANK_URL": bank.URL,
		"IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn",
		"IC_CONSOLE": "true", "IC_CONSOLE_ADDR": consoleAddr, "IC_CONSOLE_AUTH": "token", "IC_CONSOLE_TOKEN_FILE": tokens,
		"IC_AUDIT_FILE": auditFile, "IC_CONSOLE_REFRESH": "1s", "IC_APPROVAL_REQUIRED": "reopen-new-attempt,redrive-force,bulk>5",
		"IC_APPROVAL_BATCH": "4", "IC_CONSOLE_KEY_FILE": own["console"]}
	b, err := backend.Open(t.Context(), *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("CHG-OUTAGE-%02d", i)
		ids = append(ids, id)
		body, err := charge.MarshalEvent(charge.Charge{ID: id, AccountID: fmt.Sprintf("0012345678%02d", i), Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		deadLetter(t, b.Queue, body, queue.Reason{Code: queue.CodeMaxReceives, Detail: "received 10 times during a bank outage"})
	}
	serve := child(t, env, "serve")
	defer stopAll(t, serve)
	base := "http://" + consoleAddr
	consoleUp(t, base)
	// The command line (the console, started, keeps the policy and its
	// token file beside the trail): a bulk redrive is refused (it must be proposed),
	// one charge is redriven (its line goes to the same trail).
	olgaCLI := as(env, own["olga"])
	if r := runCmd(ctx, olgaCLI, "redrive", "--reason", "max_receives"); r.code != 1 || !strings.Contains(r.stderr, "approvals propose redrive --reason-code max_receives") {
		t.Fatalf("a bulk redrive on the command line: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, olgaCLI, "redrive", "--charge-id", ids[0]); r.code != 0 || !strings.Contains(r.stdout, "back to the queue: 1") {
		t.Fatalf("one redrive on the command line: %d %s %s", r.code, r.stdout, r.stderr)
	}
	token := func(name string) string { return fmt.Sprintf("%s-token-%s", name, strings.Repeat("x", 20)) } // as writeTokens made it
	signIn := func(name string) {
		t.Helper()
		br.run("sign in as "+name, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token(name)), chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#waiting")))
	}

	// Olga proposes the bulk redrive and sees what it touches.
	signIn("olga")
	br.run("propose", chromedp.Navigate(base+"/proposals"), chromedp.WaitVisible(chromedp.CSS("#propose")),
		chromedp.SetValue(chromedp.CSS(`#propose select[name=kind]`), "redrive"),
		chromedp.SendKeys(chromedp.CSS(`#propose input[name=reason_code]`), "max_receives"),
		chromedp.SendKeys(chromedp.CSS(`#propose input[name=reason]`), "INC-31: the bank is back"))
	br.shot("proposal-form")
	br.run("submit", chromedp.Click(chromedp.CSS(`#propose button`)), chromedp.WaitVisible(chromedp.CSS("#title")))
	msg := br.text("#message")
	pid := proposalID(msg)
	if br.text("#title") != "Proposed" || pid == "" || !strings.Contains(msg, "11 charge(s), INR 275.00 (11)") {
		t.Fatalf("propose: %q %q", br.text("#title"), msg)
	}
	br.run("the proposal", chromedp.Navigate(base+"/proposals/show?id="+pid), chromedp.WaitVisible(chromedp.CSS("#proposal")))
	br.shot("proposal-pending")
	if got := br.text("#pstate"); got != "pending" || !strings.Contains(br.text("#touches"), "11 charge(s)") || !strings.Contains(br.text("#mine"), "another operator") {
		t.Fatalf("the proposer's view: %q %q", got, br.text("#touches"))
	}
	html, err := chromedp.Run(br.ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, `id="approve"`) || strings.Contains(html, "001234567801") || !strings.Contains(html, "********7801") {
		t.Fatalf("the proposer is offered approval, or the accounts are not masked:\n%s", html)
	}
	// She sends the approval anyway (the reject form, pointed at approve):
	// refused.
	br.run("self-approve", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`(function(){var f=document.querySelector('form[action="/proposals/reject"]');f.action='/proposals/approve';f.querySelector('input[name=reason]').value='x';f.submit();return true})()`)(ctx, tg)
		return err
	}), chromedp.WaitVisible(chromedp.CSS("#title")))
	br.shot("proposal-self-approve-refused")
	if got := br.text("#title"); got != "Not approved" || !strings.Contains(br.text("#message"), "another operator must approve") {
		t.Fatalf("self-approval: %q %q", got, br.text("#message"))
	}
	if d, _ := b.Queue.Depth(ctx); d.DLQ != 11 {
		t.Fatalf("the DLQ has %d after a refused approval, want 11", d.DLQ)
	}

	// Ivan approves; it runs in batches of four, the page shows it.
	br.run("sign out", chromedp.Click(chromedp.CSS("button.link")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn("ivan")
	br.run("ivan's view", chromedp.Navigate(base+"/proposals/show?id="+pid), chromedp.WaitVisible(chromedp.CSS("#approve")),
		chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#title")))
	if got := br.text("#title"); got != "Approve" {
		t.Fatalf("approve: %q %q", got, br.text("#message"))
	}
	br.run("progress", chromedp.Navigate(base+"/proposals/show?id="+pid), chromedp.WaitVisible(chromedp.CSS("#progress")))
	waitUntil(t, "the run to finish", 30*time.Second, func() bool {
		s, err := chromedp.Run(br.ctx, chromedp.Text(chromedp.CSS("#pstate")))
		if err != nil || strings.TrimSpace(s) != "done" {
			_ = chromedp.Do(br.ctx, chromedp.Reload())
			return false
		}
		return true
	})
	br.shot("proposal-done")
	if got := br.text("#done"); got != "11 of 11" || !strings.Contains(br.text("#counts"), "11 moved") {
		t.Fatalf("progress: %q %q", got, br.text("#counts"))
	}
	waitUntil(t, "every charge to be debited", 60*time.Second, allDone(t, b, ids))
	posted := ledger.PostingsByKey()
	for _, id := range ids {
		if posted[id] != 1 {
			t.Fatalf("%s posted %d times (postings %v)", id, posted[id], posted)
		}
	}
	// One trail: the command line's and the console's actions, the
	// refused self-approval, the batches.
	br.run("audit", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(chromedp.CSS("#audit")))
	br.shot("audit-four-eyes")
	trail := br.text("#audit")
	for _, want := range []string{"cli", "console", "redrive", "propose", "approve", "refused", "batch", "done"} {
		if !strings.Contains(trail, want) {
			t.Errorf("the audit page lacks %q:\n%s", want, trail)
		}
	}
	raw, _ := os.ReadFile(auditFile)
	if n := strings.Count(string(raw), `"action":"batch"`); n != 3 {
		t.Errorf("%d batch lines, want 3 (11 charges, 4 a batch)", n)
	}
	// The page's filters: the command line's redrive under via=cli, the
	// console's proposal and approval under via=console.
	br.run("audit, the command line's", chromedp.Navigate(base+"/audit?via=cli&charge="+ids[0]), chromedp.WaitVisible(chromedp.CSS("#audit")))
	if cliRows := br.text("#audit tbody"); !strings.Contains(cliRows, "redrive") || !strings.Contains(cliRows, "moved") || strings.Contains(cliRows, "console") {
		t.Errorf("the audit page, via=cli, charge %s, lacks the command line's redrive (or shows the console's):\n%s", ids[0], cliRows)
	}
	br.run("audit, the console's", chromedp.Navigate(base+"/audit?via=console&proposal="+pid), chromedp.WaitVisible(chromedp.CSS("#audit")))
	if conRows := br.text("#audit tbody"); !strings.Contains(conRows, "propose") || !strings.Contains(conRows, "approve") || strings.Contains(conRows, "cli") {
		t.Errorf("the audit page, via=console, lacks the console's propose and approve of %s:\n%s", pid, conRows)
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 0 {
		t.Fatalf("audit verify: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// A line edited (the command line's redrive said to be of another
	// charge): audit verify fails, naming the line.
	raw, err = os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	edited := -1
	for i, l := range lines {
		if strings.Contains(l, `"via":"cli"`) && strings.Contains(l, `"charges":["`+ids[0]+`"]`) && strings.Contains(l, `"result":"moved"`) {
			lines[i], edited = strings.Replace(l, ids[0], "CHG-OUTAGE-99", 1), i
			break
		}
	}
	if edited < 0 {
		t.Fatalf("no line of the command line's redrive of %s in the trail:\n%s", ids[0], raw)
	}
	if err := os.WriteFile(auditFile, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(ctx, env, "audit", "verify"); r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("seq %d: no writer vouched for the line", edited+1)) {
		t.Fatalf("audit verify of a trail with line %d edited: exit %d\n%s%s", edited+1, r.code, r.stdout, r.stderr)
	}
}

// consoleListening waits (30 s at most) until the console at base
// answers its sign-in page through c at all.
func consoleListening(t *testing.T, c *http.Client, base string) {
	t.Helper()
	waitUntil(t, "the console listening", 30*time.Second, func() bool {
		resp, err := c.Get(base + "/signin")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
}

// tokenFile writes the console token file dir/tokens, one line a person
// (console.TokenLine), and returns its path.
func tokenFile(t *testing.T, dir string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A console misconfigured exits 2 naming what to set, before it opens
// anything: no anonymous console, no token sign-in in clear on a network
// address, no proxy header trusted from everyone.
func TestConsoleRefusesABadConfiguration(t *testing.T) {
	dir := t.TempDir()
	tokens := tokenFile(t, dir, console.TokenLine("olga", console.Operator, "olga-0123456789abcdef", ""))
	base := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "none.db"), "IC_CONSOLE_AUDIT_FILE": filepath.Join(dir, "audit")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no sign-in", nil, "--console-auth (IC_CONSOLE_AUTH) is required"},
		{"an unknown sign-in", []string{"--console-auth", "none"}, `--console-auth "none" is not proxy or token`},
		{"tokens without a file", []string{"--console-auth", "token"}, "needs --console-token-file"},
		{"tokens in clear on a network address", []string{"--console-auth", "token", "--console-token-file", tokens, "--console-addr", "0.0.0.0:8088"}, "would send tokens and sessions in clear"},
		{"tokens in clear on a network address, as --addr", []string{"--console-auth", "token", "--console-token-file", tokens, "--addr", "0.0.0.0:8088"}, "would send tokens and sessions in clear"},
		{"a proxy trusted from everywhere", []string{"--console-auth", "proxy", "--console-operators", "olga"}, "needs --console-trusted-proxies"},
		{"a proxy address that is none", []string{"--console-auth", "proxy", "--console-operators", "olga", "--console-trusted-proxies", "10.0.0.0/99"}, "not an address or CIDR range"},
		{"nobody may act", []string{"--console-auth", "proxy", "--console-trusted-proxies", "10.0.0.1"}, "who may act"},
		{"half of TLS", []string{"--console-auth", "token", "--console-token-file", tokens, "--console-tls-cert", "c.pem"}, "go together"},
		{"no audit file", []string{"--console-auth", "token", "--console-token-file", tokens, "--console-audit-file", ""}, "--audit-file (IC_AUDIT_FILE) is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			if len(tc.args) > 1 && tc.args[len(tc.args)-2] == "--console-audit-file" {
				delete(env, "IC_CONSOLE_AUDIT_FILE")
				tc.args = tc.args[:len(tc.args)-2]
			}
			r := runCmd(t.Context(), env, append([]string{"console"}, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
				t.Fatal("a refused console created the SQLite file")
			}
		})
	}
}

// The console command takes its address from IC_CONSOLE_ADDR (its --addr
// default used to overwrite it), and refuses a token file open to others
// or with a line it cannot read, quoting no token.
func TestConsoleTakesItsAddressAndTokenFileAsGiven(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open-tokens")
	if err := os.WriteFile(open, []byte("olga operator olga-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := filepath.Join(dir, "swapped")
	if err := os.WriteFile(swapped, []byte("olga olga-s3cret-0123456789 operator\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "none.db"), "IC_CONSOLE_AUDIT_FILE": filepath.Join(dir, "audit"),
		"IC_CONSOLE_AUTH": "token"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"IC_CONSOLE_ADDR on the network, tokens in clear", map[string]string{"IC_CONSOLE_ADDR": "0.0.0.0:8088", "IC_CONSOLE_TOKEN_FILE": swapped}, "token sign-in on 0.0.0.0:8088 over plain HTTP"},
		{"a token file open to others", map[string]string{"IC_CONSOLE_TOKEN_FILE": open}, "chmod 600 " + open},
		{"a line with its columns swapped", map[string]string{"IC_CONSOLE_TOKEN_FILE": swapped}, "line 1: the second field is not viewer or operator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			r := runCmd(t.Context(), env, "console")
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, "s3cret") {
				t.Fatalf("the error quotes a token: %q", r.stderr)
			}
		})
	}
}

// As a real process: a line removed from the token file ends its live
// session at the next request, without a restart, and its token no longer
// signs in; sign-out ends a session for every copy of the cookie.
func TestTheConsoleProcessRevokesARemovedTokenAtOnce(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	const olga, vera = "olga-operator-token-0123456789", "vera-viewer-token-0123456789"
	writeTokens := func(lines string) {
		var hashed []string
		for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
			w := strings.Fields(l)
			role, err := console.ParseRole(w[1])
			if err != nil {
				t.Fatal(err)
			}
			hashed = append(hashed, console.TokenLine(w[0], role, w[2], ""))
		}
		if err := os.WriteFile(tokens+".tmp", []byte(strings.Join(hashed, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tokens+".tmp", tokens); err != nil {
			t.Fatal(err)
		}
	}
	writeTokens("olga operator " + olga + "\nvera viewer " + vera + "\n")
	addr := freeAddr(t)
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "ic.db"), "IC_CONSOLE_ADDR": addr, "IC_CONSOLE_AUTH": "token",
		"IC_CONSOLE_TOKEN_FILE": tokens, "IC_CONSOLE_AUDIT_FILE": filepath.Join(dir, "audit.jsonl"), "IC_METRICS_URL": ""}
	mustSetup(t, env)
	proc := childLogged(t, env, filepath.Join(dir, "console.log"), "console")
	defer stopAll(t, proc)
	base := "http://" + addr
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	consoleListening(t, noRedirect, base)
	signIn := func(token string) *http.Cookie {
		resp, err := noRedirect.PostForm(base+"/signin", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
			t.Fatalf("sign-in: %d %v", resp.StatusCode, resp.Cookies())
		}
		return resp.Cookies()[0]
	}
	get := func(c *http.Cookie) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/dlq", nil)
		req.AddCookie(c)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	olgaSession, veraSession := signIn(olga), signIn(vera)
	if get(olgaSession) != http.StatusOK || get(veraSession) != http.StatusOK {
		t.Fatal("the sessions do not work")
	}
	writeTokens("vera viewer " + vera + "\n")
	if code := get(olgaSession); code != http.StatusSeeOther {
		t.Fatalf("olga's live session after her line was removed: %d, want a redirect to sign in", code)
	}
	resp, err := noRedirect.PostForm(base+"/signin", url.Values{"token": {olga}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("olga's removed token: %d, want 401", resp.StatusCode)
	}
	if code := get(veraSession); code != http.StatusOK {
		t.Fatalf("vera's session: %d", code)
	}
}

// ATTACK (adversarial review of dcdebd6). Token sign-in "behind a
// TLS-terminating proxy" (the --console-trusted-proxies help) can only be
// run on loopback — Check refuses plain HTTP on any other address — so the
// proxy is on the same host (an nginx in front, a sidecar in the pod). The
// console then marks its session cookie neither Secure nor __Host-: the
// operators' browsers reach it only over https, yet send the session in
// clear to any http:// URL of the same host (a cookie ignores the port);
// an attacker on the path injects one such URL and takes an operator's
// session. X-Forwarded-Proto from the trusted proxy is ignored.
func TestReviewSessionCookieNotSecureBehindTheTLSProxyItDocuments(t *testing.T) {
	dir := t.TempDir()
	const olga = "olga-operator-token-0123456789"
	tokens := tokenFile(t, dir, console.TokenLine("olga", console.Operator, olga, ""))
	addr := freeAddr(t)
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "ic.db"), "IC_CONSOLE_ADDR": addr, "IC_CONSOLE_AUTH": "token",
		"IC_CONSOLE_TOKEN_FILE": tokens, "IC_CONSOLE_AUDIT_FILE": filepath.Join(dir, "audit.jsonl"), "IC_METRICS_URL": "",
		"IC_CONSOLE_TRUSTED_PROXIES": "127.0.0.1"} // the TLS-terminating proxy on this host
	mustSetup(t, env)
	proc := childLogged(t, env, filepath.Join(dir, "console.log"), "console")
	defer stopAll(t, proc)
	base := "http://" + addr
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	consoleListening(t, noRedirect, base)
	// The request as the TLS proxy forwards an operator's https sign-in.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/signin", strings.NewReader(url.Values{"token": {olga}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", "198.51.100.20")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Forwarded-Host", "console.bank.example")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign-in: %d %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	if !c.Secure || !strings.HasPrefix(c.Name, "__Host-") {
		t.Fatalf("an https sign-in through the trusted TLS proxy got the session cookie %q: Secure=%v (want Secure, __Host-): Set-Cookie: %s",
			c.Name, c.Secure, resp.Header.Get("Set-Cookie"))
	}
}

// queriedMetrics returns every chargerecovery_* metric name the Grafana
// dashboard and the Prometheus alert rules query, with where it is used.
func queriedMetrics(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/chargerecovery.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	name := regexp.MustCompile(`\bchargerecovery_[a-z_]+\b`)
	used := map[string]string{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				used[n] = "dashboard panel " + p.Title
			}
		}
	}
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(rules), "\n") {
		if strings.Contains(line, "runbook_url") || strings.Contains(line, "description") || strings.Contains(line, "summary") {
			continue
		}
		for _, n := range name.FindAllString(line, -1) {
			used[n] = "alerts.yml: " + strings.TrimSpace(line)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d metric names in the dashboard and the alerts: %v", len(used), used)
	}
	return used
}

// missingMetrics is every name of used that exposition (a /metrics page)
// has no sample of, with where it is used.
func missingMetrics(used map[string]string, exposition string) []string {
	exported := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, _, _ := strings.Cut(line, "{")
		n, _, _ = strings.Cut(n, " ")
		exported[n] = true
	}
	var missing []string
	for n, where := range used {
		if !exported[n] {
			missing = append(missing, n+" ("+where+")")
		}
	}
	sort.Strings(missing)
	return missing
}

// notOnAWS are the series serve leaves out on SQS + DynamoDB, and why.
var notOnAWS = map[string]string{
	"chargerecovery_queue_oldest_message_age_seconds": "SQS does not tell it through its API; the stack's CloudWatch alarm OldestChargeWaitingAlarm watches it",
	"chargerecovery_stuck_claims":                     "counting stuck claims on DynamoDB is a Scan of the whole table; `chargerecovery stuck` does it on demand",
}

// onlyWithAFlag are the series serve exports only when a flag asks for
// what they measure, and why a query of them is right without it.
var onlyWithAFlag = map[string]string{
	"chargerecovery_posting_window_open": "--posting-windows; the alert rules use it only in `unless … == 0`, which holds nothing back without it",
}

// checkQueriedMetricsExported fails for every metric the dashboard or an
// alert queries that a running serve does not export (exposition is its
// /metrics after it handled charges of every kind), except the ones the
// backend leaves out for a stated reason.
func checkQueriedMetricsExported(t *testing.T, backend, exposition string) {
	t.Helper()
	for _, m := range missingMetrics(queriedMetrics(t), exposition) {
		n, _, _ := strings.Cut(m, " ")
		if why := notOnAWS[n]; backend == "aws" && why != "" {
			continue
		}
		if onlyWithAFlag[n] != "" {
			continue
		}
		t.Errorf("queried but not exported by serve (%s): %s", backend, m)
	}
}

// The checker itself: a name the binary does not export is caught.
func TestQueriedMetricsCheckerCatchesAnUnknownName(t *testing.T) {
	used := queriedMetrics(t)
	var exposition strings.Builder
	for n := range used {
		if n != "chargerecovery_debit_seconds_bucket" {
			exposition.WriteString(n + `{x="1"} 0` + "\n")
		}
	}
	missing := missingMetrics(used, exposition.String())
	if len(missing) != 1 || !strings.HasPrefix(missing[0], "chargerecovery_debit_seconds_bucket ") {
		t.Fatalf("missing = %v, want only chargerecovery_debit_seconds_bucket", missing)
	}
}
