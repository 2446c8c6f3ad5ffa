package main

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
)

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
