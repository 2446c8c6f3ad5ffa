package main

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
)

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
