package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/clientauth"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/pki"
)

// secureBank is the simulator behind what a bank's gateway demands: TLS
// with a certificate of a private CA, client certificates signed by that
// CA, and short-lived OAuth2 tokens from its own token endpoint.
type secureBank struct {
	ledger *corebanksim.Ledger
	tokens *corebanksim.TokenIssuer
	ca     *pki.CA
	dir    string
	env    map[string]string // what serve needs to reach it
}

const simClientSecret = "s3cr3t-0f-the-c0nsumer"

func newSecureBank(t *testing.T, ttl time.Duration) *secureBank {
	t.Helper()
	return newSecureBankNamed(t, ttl, "127.0.0.1", "localhost")
}

// newSecureBankNamed is newSecureBank with a server certificate, signed by
// the bank's CA, that names hosts.
func newSecureBankNamed(t *testing.T, ttl time.Duration, hosts ...string) *secureBank {
	t.Helper()
	ca, err := pki.NewCA("test bank CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	now := time.Now()
	server, err := ca.IssueServer("corebank", hosts, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue("chargerecovery", false, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := client.Write(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	caFile, secretFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client-secret")
	if err := pki.WriteFile(caFile, ca.PEM); err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteFile(secretFile, []byte(simClientSecret+"\n")); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(server.Cert, server.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	b := &secureBank{ledger: corebanksim.NewLedger(corebanksim.Faults{Latency: 20 * time.Millisecond}),
		tokens: corebanksim.NewTokenIssuer("chargerecovery", simClientSecret, ttl), ca: ca, dir: dir}
	srv := httptest.NewUnstartedServer(corebanksim.Secure(corebanksim.Handler(b.ledger), b.tokens))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	b.env = map[string]string{"IC_COREBANK_URL": srv.URL, "IC_COREBANK_CA": caFile,
		"IC_COREBANK_CLIENT_CERT": certFile, "IC_COREBANK_CLIENT_KEY": keyFile,
		"IC_COREBANK_OAUTH_TOKEN_URL": srv.URL + "/oauth/token", "IC_COREBANK_OAUTH_CLIENT_ID": "chargerecovery",
		"IC_COREBANK_OAUTH_CLIENT_SECRET_FILE": secretFile, "IC_COREBANK_ENQUIRY": "true",
		"IC_CIRCUIT_PROBE": "300ms", "IC_CIRCUIT_PROBE_MAX": "1s"}
	return b
}

// rotate puts a new client certificate (same CA, new serial) in place.
func (b *secureBank) rotate(t *testing.T) {
	t.Helper()
	now := time.Now()
	p, err := b.ca.Issue("chargerecovery", false, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Write(b.dir, "client"); err != nil {
		t.Fatal(err)
	}
}

// The whole flow over mutual TLS and OAuth2, as real processes: two serve
// processes, tokens that expire every 2 s during the run, and the client
// certificate rotated on disk mid-run. Every charge is posted once and
// DONE, nothing FAILED, nothing dead-lettered; the bank saw both client
// certificates and issued several tokens.
func TestMutualTLSAndOAuth2AsRealProcesses(t *testing.T) {
	t.Parallel()
	bank := newSecureBank(t, 2*time.Second)
	env := bank.embedded(t, "mtls.db", nil)
	var ids []string
	first, b, _ := sendCharges(t, env, "MTLS1", 40, bank.ledger)
	ids = append(ids, first...)
	dir := t.TempDir()
	p1 := childLogged(t, env, filepath.Join(dir, "serve-1.log"), "serve")
	p2 := childLogged(t, env, filepath.Join(dir, "serve-2.log"), "serve")
	waitUntil(t, "the first wave debited", 30*time.Second, allFinished(t, b, ids))
	time.Sleep(2500 * time.Millisecond) // the first tokens expire
	bank.rotate(t)
	time.Sleep(1500 * time.Millisecond) // the files are read again at most once a second
	more, _, _ := sendCharges(t, env, "MTLS2", 40, bank.ledger)
	ids = append(ids, more...)
	waitUntil(t, "the second wave debited", 30*time.Second, allFinished(t, b, ids))
	time.Sleep(2500 * time.Millisecond)
	last, _, _ := sendCharges(t, env, "MTLS3", 40, bank.ledger)
	ids = append(ids, last...)
	waitUntil(t, "the third wave debited", 30*time.Second, allFinished(t, b, ids))
	stopAll(t, p1, p2)

	posted := bank.ledger.PostingsByKey()
	for _, id := range ids {
		rec, err := b.Store.Get(t.Context(), id, time.Now())
		if err != nil || rec.State != driver.StateDone || posted[id] != 1 {
			t.Errorf("%s: %v %v, posted %d; want DONE, posted once", id, rec.State, err, posted[id])
		}
	}
	if d := bank.ledger.DuplicateRequests(); len(d) != 0 {
		t.Errorf("debits asked again after confirmation: %v", d)
	}
	if r := runCmd(t.Context(), env, "redrive", "--dry-run", "--json"); !strings.Contains(r.stdout, `"seen":0`) {
		t.Errorf("DLQ not empty: %s", r.stdout)
	}
	if n := bank.tokens.Issued(); n < 3 {
		t.Errorf("%d tokens issued: they did not expire during the run", n)
	}
	if s := bank.tokens.Serials(); len(s) != 2 {
		t.Errorf("the bank saw %d client certificate(s), want the original and the rotated one", len(s))
	}
	for _, l := range []string{"serve-1.log", "serve-2.log"} {
		b, _ := os.ReadFile(filepath.Join(dir, l))
		if strings.Contains(string(b), simClientSecret) {
			t.Errorf("%s holds the client secret", l)
		}
	}
}

// Wrong credentials as a real process: /readyz answers 503 naming the
// cause, no charge is FAILED, nothing is dead-lettered; once the file is
// fixed on disk (no restart), everything posts once.
func TestWrongCredentialsSayWhyAndLoseNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		break_ func(t *testing.T, b *secureBank) (fix func())
		want   string
	}{
		{"refused client secret", func(t *testing.T, b *secureBank) func() {
			return replaceFile(t, b.env["IC_COREBANK_OAUTH_CLIENT_SECRET_FILE"], []byte("not-the-secret"))
		}, "token"},
		{"untrusted server certificate", func(t *testing.T, b *secureBank) func() {
			other, _ := pki.NewCA("another CA")
			return replaceFile(t, b.env["IC_COREBANK_CA"], other.PEM)
		}, "not signed by a CA we trust"},
		{"expired client certificate", func(t *testing.T, b *secureBank) func() {
			now := time.Now()
			p, err := b.ca.Issue("chargerecovery", false, now.Add(-2*time.Hour), now.Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.Write(b.dir, "client"); err != nil {
				t.Fatal(err)
			}
			return func() { b.rotate(t) }
		}, "expired"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bank := newSecureBank(t, time.Minute)
			env := bank.embedded(t, "bad.db", map[string]string{"IC_LOG_LEVEL": "info", "IC_MAX_RECEIVE": "4"})
			fix := tt.break_(t, bank)
			ids, b, _ := sendCharges(t, env, "BAD", 20, bank.ledger)
			proc, body, _ := serveUnready(t, env, "/readyz naming the cause", tt.want)
			if strings.Contains(body, simClientSecret) || strings.Contains(body, "not-the-secret") {
				t.Fatalf("/readyz shows a secret: %s", body)
			}
			for _, id := range ids {
				if rec, err := b.Store.Get(t.Context(), id, time.Now()); err == nil && rec.State != driver.StateInProgress {
					t.Fatalf("%s is %s during the credential failure, want nothing final", id, rec.State)
				}
			}
			if n := len(bank.ledger.Entries()); n != 0 {
				t.Fatalf("%d postings with wrong credentials", n)
			}
			fix()
			waitUntil(t, "every charge debited after the fix", 60*time.Second, allFinished(t, b, ids))
			stopAll(t, proc)
			posted := bank.ledger.PostingsByKey()
			for _, id := range ids {
				if posted[id] != 1 {
					t.Errorf("%s posted %d times", id, posted[id])
				}
			}
			if r := runCmd(t.Context(), env, "redrive", "--dry-run", "--json"); !strings.Contains(r.stdout, `"seen":0`) {
				t.Errorf("DLQ not empty: %s", r.stdout)
			}
			t.Logf("/readyz said: %s", strings.TrimSpace(body))
		})
	}
}

// The wrong server, as a real process: a bank at an IP address whose
// certificate — signed by the pinned CA — names another host is refused by
// the TLS handshake itself: no token is requested (the client secret never
// reaches it), no debit is sent, /readyz says the certificate does not name
// the host, and nothing is FAILED or dead-lettered.
func TestAServerCertifiedForAnotherNameGetsNothing(t *testing.T) {
	t.Parallel()
	bank := newSecureBankNamed(t, time.Minute, "other-bank.example", "10.9.9.9")
	if !strings.HasPrefix(bank.env["IC_COREBANK_URL"], "https://127.0.0.1:") {
		t.Fatalf("the bank is at %s, want an IP address", bank.env["IC_COREBANK_URL"])
	}
	env := bank.embedded(t, "wrong.db", map[string]string{"IC_LOG_LEVEL": "info"})
	ids, b, _ := sendCharges(t, env, "WRONG", 10, bank.ledger)
	proc, body, _ := serveUnready(t, env, "/readyz naming the host mismatch", "does not name the host")
	time.Sleep(time.Second) // a few more tries, all refused
	stopAll(t, proc)
	if n := bank.tokens.Issued(); n != 0 {
		t.Errorf("%d tokens issued to a server certified for another name: the client secret reached it", n)
	}
	if n := bank.tokens.Requests(); n != 0 {
		t.Errorf("%d token requests reached a server certified for another name", n)
	}
	if n := len(bank.ledger.Entries()); n != 0 {
		t.Errorf("%d debits posted to a server certified for another name", n)
	}
	for _, id := range ids {
		if rec, err := b.Store.Get(t.Context(), id, time.Now()); err == nil && rec.State != driver.StateInProgress {
			t.Errorf("%s is %s, want nothing final", id, rec.State)
		}
	}
	t.Logf("/readyz said: %s", strings.TrimSpace(body))
}

// replaceFile writes b over file and returns what puts the old content back.
func replaceFile(t *testing.T, file string, b []byte) func() {
	t.Helper()
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteFile(file, b); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := pki.WriteFile(file, good); err != nil {
			t.Fatal(err)
		}
	}
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// embedded is the environment of an embedded installation (its database
// name in a folder of its own, four workers) that reaches the bank,
// settings on top.
func (b *secureBank) embedded(t *testing.T, name string, settings map[string]string) map[string]string {
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), name), "IC_CONCURRENCY": "4"}
	for _, m := range []map[string]string{settings, b.env} {
		for k, v := range m {
			env[k] = v
		}
	}
	return env
}

// serveUnready starts serve as a process with env, logging to a file of
// its own, and waits (30 s at most, for what) until its /readyz answers
// 503 saying want: the process, what /readyz said, and the log's path.
func serveUnready(t *testing.T, env map[string]string, what, want string) (*exec.Cmd, string, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	proc := childLogged(t, env, logPath, "serve")
	ready := readyzOf(t, logPath)
	var body string
	waitUntil(t, what, 30*time.Second, func() bool {
		code, b := getBody(ready)
		body = b
		return code == http.StatusServiceUnavailable && strings.Contains(b, want)
	})
	return proc, body, logPath
}

// readyzOf reads serve's ops address from its log.
func readyzOf(t *testing.T, logPath string) string {
	t.Helper()
	re := regexp.MustCompile(`"msg":"serving /metrics, /healthz and /readyz","addr":"([^"]+)"`)
	var addr string
	waitUntil(t, "serve's HTTP address in its log", 30*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		if m := re.FindSubmatch(b); m != nil {
			addr = string(m[1])
		}
		return addr != ""
	})
	return "http://" + addr + "/readyz"
}

func getBody(url string) (int, string) { return getWith(http.DefaultClient, url) }

// The webhook channel with the bank's authentication options: mutual TLS
// and OAuth2 to the receiver; every charge's notice is accepted.
func TestWebhookOverMutualTLSAndOAuth2(t *testing.T) {
	t.Parallel()
	sec := newSecureBank(t, time.Minute) // its PKI and token issuer, reused for the receiver
	var mu sync.Mutex
	got := map[string]bool{}
	receiver := httptest.NewUnstartedServer(corebanksim.Secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n charge.Notice
		_ = json.NewDecoder(r.Body).Decode(&n)
		mu.Lock()
		got[n.ChargeID] = true
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}), sec.tokens))
	now := time.Now()
	server, err := sec.ca.Issue("receiver", true, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := tls.X509KeyPair(server.Cert, server.Key)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.ca.PEM)
	receiver.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	receiver.StartTLS()
	defer receiver.Close()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "hook.db"),
		"IC_NOTIFY": "webhook", "IC_NOTIFY_URL": receiver.URL + "/notices", "IC_NOTIFY_CA": sec.env["IC_COREBANK_CA"],
		"IC_NOTIFY_CLIENT_CERT": sec.env["IC_COREBANK_CLIENT_CERT"], "IC_NOTIFY_CLIENT_KEY": sec.env["IC_COREBANK_CLIENT_KEY"],
		"IC_NOTIFY_OAUTH_TOKEN_URL": sec.env["IC_COREBANK_OAUTH_TOKEN_URL"], "IC_NOTIFY_OAUTH_CLIENT_ID": "chargerecovery",
		"IC_NOTIFY_OAUTH_CLIENT_SECRET_FILE": sec.env["IC_COREBANK_OAUTH_CLIENT_SECRET_FILE"]}
	ids, b, _ := sendCharges(t, env, "WHS", 20)
	serveUntil(t, env, nil, allFinished(t, b, ids))
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		rec, err := b.Store.Get(t.Context(), id, time.Now())
		if err != nil || rec.Status != string(charge.Debited) || !got[id] {
			t.Errorf("%s: %v %v, notice received %v; want DEBITED with its notice", id, rec.Status, err, got[id])
		}
	}
}

// The simulator command demands what a bank's gateway demands: TLS,
// client certificates of its CA, Bearer tokens from its token endpoint.
func TestTheSimulatorCommandEnforcesMutualTLSAndTokens(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("sim CA")
	if err != nil {
		t.Fatal(err)
	}
	dir, now := t.TempDir(), time.Now()
	server, _ := ca.Issue("corebank", true, now.Add(-time.Hour), now.Add(time.Hour))
	client, _ := ca.Issue("chargerecovery", false, now.Add(-time.Hour), now.Add(time.Hour))
	serverCert, serverKey, _ := server.Write(dir, "server")
	clientCert, clientKey, _ := client.Write(dir, "client")
	caFile, secretFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "secret")
	_ = pki.WriteFile(caFile, ca.PEM)
	_ = pki.WriteFile(secretFile, []byte("sim-secret"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	logs, done := startCmd(ctx, nil, "corebank", "--addr", addr, "--tls-cert", serverCert, "--tls-key", serverKey, "--client-ca", caFile,
		"--oauth-client-id", "svc", "--oauth-client-secret-file", secretFile, "--token-ttl", "1s", "--log-level", "warn")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	waitUntil(t, "the simulator listening", 10*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if resp, err := noCert.Get("https://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %d", resp.StatusCode)
	}
	pair, _ := tls.X509KeyPair(client.Cert, client.Key)
	certOnly := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	if code, _ := getWith(certOnly, "https://"+addr+"/v1/ledger"); code != http.StatusUnauthorized {
		t.Fatalf("a client certificate without a token: %d, want 401", code)
	}
	auth, err := clientauth.New(clientauth.Options{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey,
		TokenURL: "https://" + addr + "/oauth/token", ClientID: "svc", ClientSecretFile: secretFile})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the second after the first token expired
		if code, body := getWith(auth.Client(), "https://"+addr+"/v1/ledger"); code != http.StatusOK {
			t.Fatalf("request %d with certificate and token: %d %s", i+1, code, body)
		}
		time.Sleep(1200 * time.Millisecond)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("corebank exited %d: %s", code, logs.String())
	}
}

func getWith(c *http.Client, url string) (int, string) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Adversarial end-to-end tests: each FAILS on the code it was written
// against.

// serve as a real process, with a client secret holding a '"' and a '\'
// and an identity provider that echoes it in an RFC 6749 error answer
// (error_description): x/oauth2 quotes it with %q, scrub looks only for
// the raw, URL-encoded and base64 forms, and the quoted secret is written
// to serve's log (every retry, every readiness failure).
func TestReviewServeLogsAnEscapedClientSecret(t *testing.T) {
	t.Parallel()
	const secret = `Pq7"live\secret-9f3b2c`
	bank := newSecureBank(t, time.Minute)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		echo := r.PostForm.Get("client_secret")
		if _, pw, ok := r.BasicAuth(); ok {
			echo = pw // Basic auth carries it URL-encoded: decode as an IdP does
			if u, err := urlQueryUnescape(pw); err == nil {
				echo = u
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client", "error_description": "client authentication failed for secret " + echo})
	}))
	defer idp.Close()
	if err := pki.WriteFile(bank.env["IC_COREBANK_OAUTH_CLIENT_SECRET_FILE"], []byte(secret+"\n")); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "leak.db"), "IC_CONCURRENCY": "2", "IC_LOG_LEVEL": "info",
		"IC_COREBANK_OAUTH_TOKEN_URL": idp.URL + "/oauth/token"} // loopback http: allowed
	for k, v := range bank.env {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	_, _, _ = sendCharges(t, env, "LEAK", 3, bank.ledger)
	proc, _, logPath := serveUnready(t, env, "/readyz naming the token failure", "")
	time.Sleep(2 * time.Second) // a few tries
	stopAll(t, proc)
	log, _ := os.ReadFile(logPath)
	quoted := strings.Trim(strconv.Quote(secret), `"`)     // as %q prints it
	jsonQuoted := strings.Trim(strconv.Quote(quoted), `"`) // and again inside a JSON log line
	for _, form := range []string{secret, quoted, jsonQuoted} {
		if n := strings.Count(string(log), form); n > 0 {
			for _, l := range strings.Split(string(log), "\n") {
				if strings.Contains(l, form) {
					t.Errorf("serve's log holds the client secret (as %s) %d times, e.g.:\n%s", form, n, l)
					break
				}
			}
		}
	}
	db, _ := os.ReadFile(env["IC_DB"])
	if strings.Contains(string(db), quoted) {
		t.Errorf("the database file holds the client secret (as %s)", quoted)
	}
}

func urlQueryUnescape(s string) (string, error) { return url.QueryUnescape(s) }

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
