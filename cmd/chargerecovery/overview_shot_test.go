package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/queue"
)

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
