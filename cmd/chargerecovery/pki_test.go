package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/pki"
)

// pkiEnv runs pki into dir and returns serve's and corebank ledger's
// variables for the simulator at addr, and corebank's flags.
func pkiEnv(t *testing.T, dir, addr string) (env map[string]string, corebank []string) {
	t.Helper()
	if r := runCmd(t.Context(), nil, "pki", "--dir", dir); r.code != 0 || !strings.Contains(r.stdout, "development only") {
		t.Fatalf("pki: %d %q %s", r.code, r.stdout, r.stderr)
	}
	for _, name := range []string{"bank.key", "consumer.key", "oauth-client-secret"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", name, st.Mode(), err)
		}
	}
	env, corebank = pkiFlags(dir, addr)
	return env, corebank
}

// pkiFlags are serve's variables and corebank's flags for pki's files in dir.
func pkiFlags(dir, addr string) (env map[string]string, corebank []string) {
	f := func(n string) string { return filepath.Join(dir, n) }
	env = map[string]string{
		"IC_COREBANK_URL": "https://" + addr, "IC_COREBANK_CA": f("ca.crt"),
		"IC_COREBANK_CLIENT_CERT": f("consumer.crt"), "IC_COREBANK_CLIENT_KEY": f("consumer.key"),
		"IC_COREBANK_OAUTH_CLIENT_ID": "chargerecovery", "IC_COREBANK_OAUTH_CLIENT_SECRET_FILE": f("oauth-client-secret"),
		"IC_COREBANK_OAUTH_TOKEN_URL": "https://" + addr + "/oauth/token",
	}
	corebank = []string{"corebank", "--addr", addr, "--tls-cert", f("bank.crt"), "--tls-key", f("bank.key"), "--client-ca", f("ca.crt"),
		"--oauth-client-id", "chargerecovery", "--oauth-client-secret-file", f("oauth-client-secret"), "--log-level", "warn"}
	return env, corebank
}

// pki's files are what corebank and serve need for mutual TLS and OAuth2:
// a charge sent 3 times is debited once, and corebank ledger (no curl, no
// hand-made token) shows that one posting, masked; a client certificate of
// another CA is refused, and so is a certificate that does not name the
// host called.
func TestPKIFilesRunServeAgainstTheSimulatorOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), freeAddr(t)
	env, corebank := pkiEnv(t, filepath.Join(dir, "pki"), addr)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	logs, done := startCmd(ctx, nil, corebank...)
	waitUntil(t, "the simulator listening", 10*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	for k, v := range map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "q.db"), "IC_POLL_WAIT": "200ms", "IC_HTTP_ADDR": "127.0.0.1:0"} {
		env[k] = v
	}
	mustSetup(t, env)
	if r := runCmd(ctx, env, "send", "--charge-id", "CHG-PKI-1", "--account", "001234567890", "--amount-minor", "2500", "--copies", "3"); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	var ledger result
	serveUntil(t, env, []string{"--visibility", "3s", "--lease", "5s"}, func() bool {
		ledger = runCmd(ctx, env, "corebank", "ledger")
		return strings.Contains(ledger.stdout, "CHG-PKI-1")
	})
	if ledger.code != 0 || !regexp.MustCompile(`(?m)^1\s+CHG-PKI-1\s+\*{8}7890\s+INR 25\.00\s+`).MatchString(ledger.stdout) ||
		!strings.Contains(ledger.stdout, "1 postings;") || strings.Contains(ledger.stdout, "001234567890") {
		t.Fatalf("corebank ledger: %d %q %s", ledger.code, ledger.stdout, ledger.stderr)
	}
	r := runCmd(ctx, env, "corebank", "ledger", "--json")
	var js struct {
		Count    int
		Postings []ledgerLine
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.Count != 1 || js.Postings[0].Account != "********7890" ||
		js.Postings[0].AmountMinor != 2500 || js.Postings[0].Amount != "INR 25.00" || strings.Contains(r.stdout, "001234567890") {
		t.Fatalf("corebank ledger --json: %v %q %s", err, r.stdout, r.stderr)
	}

	// A client certificate of another CA: the handshake is refused.
	other, err := pki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	stranger, _ := other.Issue("stranger", false, now.Add(-time.Hour), now.Add(time.Hour))
	sCert, sKey, err := stranger.Write(dir, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	bad := copyEnv(env)
	bad["IC_COREBANK_CLIENT_CERT"], bad["IC_COREBANK_CLIENT_KEY"] = sCert, sKey
	// In TLS 1.3 the client's side of the handshake ends before the server
	// has checked its certificate: the refusal arrives as the server's
	// alert or as a closed connection, whichever the client reads first.
	// Either way no answer comes, where the right certificate gets one.
	if r := runCmd(ctx, bad, "corebank", "ledger"); r.code != 1 || r.stdout != "" || strings.Contains(r.stderr, "HTTP ") {
		t.Fatalf("a client certificate of another CA: %d %q %s", r.code, r.stdout, r.stderr)
	}
	caPEM, _ := os.ReadFile(env["IC_COREBANK_CA"])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, c := range []struct {
		cert, key string
		ok        bool
	}{{sCert, sKey, false}, {env["IC_COREBANK_CLIENT_CERT"], env["IC_COREBANK_CLIENT_KEY"], true}} {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != c.ok {
			t.Fatalf("GET /healthz with %s: %v, want refused: %v", filepath.Base(c.cert), err, !c.ok)
		}
	}
	// The wrong server name: Go's verifier refuses the simulator's certificate.
	pair, err := tls.LoadX509KeyPair(env["IC_COREBANK_CLIENT_CERT"], env["IC_COREBANK_CLIENT_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "bank.example"}}}
	_, err = hc.Get("https://" + addr + "/healthz")
	var hostErr x509.HostnameError
	if !errors.As(err, &hostErr) {
		t.Fatalf("a certificate not naming the host: %v, want a hostname error", err)
	}
	// A wrong secret: no token, said so.
	wrong := filepath.Join(dir, "wrong-secret")
	_ = os.WriteFile(wrong, []byte("not-the-secret\n"), 0o600)
	bad = copyEnv(env)
	bad["IC_COREBANK_OAUTH_CLIENT_SECRET_FILE"] = wrong
	if r := runCmd(ctx, bad, "corebank", "ledger"); r.code != 1 || !strings.Contains(r.stderr, "refused our client credentials") {
		t.Fatalf("a wrong secret: %d %q %s", r.code, r.stdout, r.stderr)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("corebank exited %d: %s", code, logs.String())
	}
}

func copyEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	return out
}

// pki refuses to overwrite what is there (unless --force), a directory
// others may write to, and says it is for development only.
func TestPKIRefusesToOverwriteAndSaysDevelopmentOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	if r := runCmd(ctx, nil, "pki", "-h"); r.code != 0 || !strings.Contains(r.stderr, "DEVELOPMENT ONLY") {
		t.Fatalf("pki -h: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, nil, "pki"); r.code != 2 || !strings.Contains(r.stderr, "--dir is required") {
		t.Fatalf("pki without --dir: %d %s", r.code, r.stderr)
	}
	dir := t.TempDir()
	keep := []byte("someone's certificate\n")
	if err := os.WriteFile(filepath.Join(dir, "bank.crt"), keep, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCmd(ctx, nil, "pki", "--dir", dir)
	entries, _ := os.ReadDir(dir)
	if b, _ := os.ReadFile(filepath.Join(dir, "bank.crt")); r.code != 2 || !strings.Contains(r.stderr, "already holds bank.crt") ||
		string(b) != string(keep) || len(entries) != 1 {
		t.Fatalf("pki into a directory with a file: %d %s; %d entries", r.code, r.stderr, len(entries))
	}
	if r := runCmd(ctx, nil, "pki", "--dir", dir, "--force", "--host", "bank.internal,10.0.0.7"); r.code != 0 {
		t.Fatalf("pki --force: %d %s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "bank.crt"))
	cert, err := tls.X509KeyPair(b, mustRead(t, filepath.Join(dir, "bank.key")))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	if err := leaf.VerifyHostname("bank.internal"); err != nil || leaf.VerifyHostname("10.0.0.7") != nil || leaf.VerifyHostname("127.0.0.1") != nil {
		t.Fatalf("server certificate names %v %v: %v", leaf.DNSNames, leaf.IPAddresses, err)
	}
	// A key others can read is refused by the simulator and by the consumer.
	_ = os.Chmod(filepath.Join(dir, "bank.key"), 0o644)
	_ = os.Chmod(filepath.Join(dir, "consumer.key"), 0o644)
	env, corebank := pkiFlags(dir, "127.0.0.1:1")
	if r := runCmd(ctx, nil, corebank...); r.code != 2 || !strings.Contains(r.stderr, "--tls-key: "+filepath.Join(dir, "bank.key")+" is readable or writable by others") {
		t.Fatalf("corebank with a world-readable key: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, env, "corebank", "ledger"); r.code != 2 || !strings.Contains(r.stderr, "chmod 600 "+filepath.Join(dir, "consumer.key")) {
		t.Fatalf("corebank ledger with a world-readable key: %d %s", r.code, r.stderr)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	if r := runCmd(ctx, nil, "pki", "--dir", open); r.code != 2 || !strings.Contains(r.stderr, "writable by others") {
		t.Fatalf("pki into a world-writable directory: %d %s", r.code, r.stderr)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// setup --notify sns checks the topic's name before it creates anything.
func TestSetupRefusesABadTopicName(t *testing.T) {
	t.Parallel()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "s.db"), "IC_NOTIFY": "sns"}
	r := runCmd(t.Context(), env, "setup", "--notify-sns-topic", "pre debit!")
	if _, err := os.Stat(env["IC_DB"]); r.code != 2 || !strings.Contains(r.stderr, `--notify-sns-topic "pre debit!"`) || err == nil {
		t.Fatalf("setup with a bad topic name: %d %s (file: %v)", r.code, r.stderr, err)
	}
}
