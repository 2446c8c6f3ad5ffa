package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/queue"
)

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
