package clientauth_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/clientauth"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/internal/pki"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// pinnedTo serves an empty page over TLS with a certificate of srvCA for
// host, and returns an Auth that trusts the CA bundle in caFile, written
// with trusted's certificate (a test may rewrite it).
func pinnedTo(t *testing.T, trusted, srvCA *pki.CA, host string) (srv *httptest.Server, caFile string, a *clientauth.Auth) {
	t.Helper()
	srv = tlsServer(t, srvCA, []string{host}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	write(t, caFile, string(trusted.PEM))
	a, err := clientauth.New(clientauth.Options{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	return srv, caFile, a
}

// tlsServer serves ok over TLS with a certificate of ca for hosts.
func tlsServer(t *testing.T, ca *pki.CA, hosts []string, h http.Handler) *httptest.Server {
	t.Helper()
	now := time.Now()
	p, err := ca.IssueServer("server", hosts, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// A pinned CA does not make every certificate it signed the bank's: the
// server must be certified for the host of the URL, an IP address (IP SAN)
// as much as a name, checked by Go's own verifier.
func TestTheServerMustBeCertifiedForTheHostCalled(t *testing.T) {
	ca, err := pki.NewCA("bank CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	write(t, caFile, string(ca.PEM))
	var reached atomic.Int32
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) })
	for _, tc := range []struct {
		name  string
		hosts []string
		host  string // how the URL names the server
		want  bool
	}{
		{"IP certified for the IP", []string{"127.0.0.1"}, "127.0.0.1", true},
		{"IP certified for another name", []string{"other-bank.example"}, "127.0.0.1", false},
		{"IP certified for another IP", []string{"10.1.2.3"}, "127.0.0.1", false},
		{"name certified for the name", []string{"localhost"}, "localhost", true},
		{"name certified for the IP only", []string{"127.0.0.1"}, "localhost", false},
		{"no name at all", []string{}, "127.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tlsServer(t, ca, tc.hosts, ok)
			u, _ := url.Parse(srv.URL)
			u.Host = tc.host + ":" + u.Port()
			a, err := clientauth.New(clientauth.Options{CAFile: caFile})
			if err != nil {
				t.Fatal(err)
			}
			before := reached.Load()
			resp, err := a.Client().Get(u.String())
			if resp != nil {
				resp.Body.Close()
			}
			switch {
			case tc.want && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.want && err == nil:
				t.Fatal("accepted a server certified for another host")
			case !tc.want:
				var h x509.HostnameError
				if !errors.As(err, &h) || !strings.Contains(clientauth.Explain(err), "does not name the host") {
					t.Fatalf("err = %v (%q), want a host name error", err, clientauth.Explain(err))
				}
				if reached.Load() != before {
					t.Fatal("the request reached the server")
				}
			}
		})
	}
}

// A new CA bundle on disk is used for the next connection (rotation
// without a restart), and the old one's pooled connections are closed.
func TestARotatedCABundleIsUsed(t *testing.T) {
	oldCA, _ := pki.NewCA("old CA")
	newCA, _ := pki.NewCA("new CA")
	srv, caFile, a := pinnedTo(t, oldCA, newCA, "127.0.0.1")
	if _, err := a.Client().Get(srv.URL); err == nil || !strings.Contains(clientauth.Explain(err), "not signed by a CA we trust") {
		t.Fatalf("with the old bundle: %v, want refused as untrusted", err)
	}
	time.Sleep(1100 * time.Millisecond)
	write(t, caFile, string(newCA.PEM))
	resp, err := a.Client().Get(srv.URL)
	if err != nil {
		t.Fatalf("with the new bundle: %v", err)
	}
	resp.Body.Close()
}

// A redirect from the token endpoint is never followed: the client secret
// goes to the configured token URL and nowhere else.
func TestTheTokenRequestFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int32
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"x","token_type":"Bearer"}`)
	}))
	defer thief.Close()
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, thief.URL+"/token", code)
		}))
		secret := filepath.Join(t.TempDir(), "secret")
		write(t, secret, "the-client-secret\n")
		a, err := clientauth.New(clientauth.Options{TokenURL: idp.URL + "/token", ClientID: "svc", ClientSecretFile: secret})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Client().Get(idp.URL + "/api")
		idp.Close()
		var te *clientauth.TokenError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "redirect") {
			t.Errorf("%d: err = %v, want a token error naming the redirect", code, err)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect target got %d token requests", n)
	}
}

// An identity provider that echoes the request puts the secret in its
// answer raw, URL-encoded and in Basic authentication's base64: none of
// them reaches an error or Check.
func TestAnEchoedSecretIsScrubbedInEveryEncoding(t *testing.T) {
	const id, secretValue = "svc client", "s3cr+et/with=odd&chars"
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "bad request: auth=%q body=%q raw=%s", r.Header.Get("Authorization"), body, secretValue)
	}))
	defer idp.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, secretValue+"\n")
	a, err := clientauth.New(clientauth.Options{TokenURL: idp.URL + "/token", ClientID: id, ClientSecretFile: secret})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Client().Get(idp.URL + "/api")
	if err == nil {
		t.Fatal("no error")
	}
	forms := []string{secretValue, url.QueryEscape(secretValue), url.PathEscape(secretValue),
		base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id) + ":" + url.QueryEscape(secretValue))),
		base64.StdEncoding.EncodeToString([]byte(id + ":" + secretValue))}
	for _, text := range []string{err.Error(), fmt.Sprint(a.Check())} {
		if !strings.Contains(text, "[secret]") {
			t.Errorf("the echo was not seen: %s", text)
		}
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Errorf("%q is in %s", f, text)
			}
		}
	}
}

// Secret files must be owner-only, at start and at every later read.
func TestSecretFilesMustBeOwnerOnly(t *testing.T) {
	ca, _ := pki.NewCA("CA")
	now := time.Now()
	client, _ := ca.Issue("client", false, now.Add(-time.Hour), now.Add(time.Hour))
	for _, tc := range []struct {
		name string
		opts func(dir string) (clientauth.Options, string) // and the secret file
	}{
		{"client key", func(dir string) (clientauth.Options, string) {
			cert, key, _ := client.Write(dir, "client")
			return clientauth.Options{CertFile: cert, KeyFile: key}, key
		}},
		{"client secret", func(dir string) (clientauth.Options, string) {
			f := filepath.Join(dir, "secret")
			write(t, f, "secret-value")
			return clientauth.Options{TokenURL: "https://idp.example/token", ClientID: "svc", ClientSecretFile: f}, f
		}},
		{"header file", func(dir string) (clientauth.Options, string) {
			f := filepath.Join(dir, "headers")
			write(t, f, "X-Api-Key: k1\n")
			return clientauth.Options{HeaderFile: f}, f
		}},
	} {
		for _, mode := range []fs.FileMode{0o644, 0o640, 0o666} {
			t.Run(fmt.Sprintf("%s %04o", tc.name, mode), func(t *testing.T) {
				o, file := tc.opts(t.TempDir())
				if err := os.Chmod(file, mode); err != nil {
					t.Fatal(err)
				}
				_, err := clientauth.New(o)
				if !errors.Is(err, secretfile.ErrOpen) || !strings.Contains(err.Error(), "chmod 600 "+file) {
					t.Fatalf("err = %v, want the file named with its chmod", err)
				}
				if err := os.Chmod(file, 0o600); err != nil {
					t.Fatal(err)
				}
				if _, err := clientauth.New(o); err != nil {
					t.Fatalf("0600 refused: %v", err)
				}
			})
		}
	}
	// Opened up later: the next read refuses it, and the last good value
	// stays in use (a rotation is never half taken).
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "X-Api-Key: k1\n")
	a, err := clientauth.New(clientauth.Options{HeaderFile: f})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.Header.Get("X-Api-Key")) }))
	defer srv.Close()
	time.Sleep(1100 * time.Millisecond)
	write(t, f, "X-Api-Key: k2\n")
	_ = os.Chmod(f, 0o644)
	resp, err := a.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Load() != "k1" {
		t.Fatalf("key %v: a header file opened to others was read", got.Load())
	}
}

// A secret is never sent in clear over the network: plain http is for the
// loopback interface only once a request carries a secret.
func TestSecretsAreNotSentOverPlainHTTP(t *testing.T) {
	dir := t.TempDir()
	headers := filepath.Join(dir, "headers")
	write(t, headers, "X-Api-Key: k\n")
	secret := filepath.Join(dir, "secret")
	write(t, secret, "s")
	withHeaders, err := clientauth.New(clientauth.Options{HeaderFile: headers})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := pki.NewCA("CA")
	caFile := filepath.Join(dir, "ca.pem")
	write(t, caFile, string(ca.PEM))
	onlyCA, err := clientauth.New(clientauth.Options{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a    *clientauth.Auth
		url  string
		want bool
	}{
		{withHeaders, "https://bank.example/v1", true},
		{withHeaders, "http://127.0.0.1:8081", true},
		{withHeaders, "http://localhost:8081", true},
		{withHeaders, "http://[::1]:8081", true},
		{withHeaders, "http://bank.example/v1", false},
		{withHeaders, "http://10.0.0.5:8081", false},
		{withHeaders, "ftp://bank.example", false},
		{onlyCA, "http://bank.example/v1", false}, // TLS asked for, turned off by the URL
		{onlyCA, "http://127.0.0.1:8081", true},
		{nil, "http://bank.example/v1", true},
	} {
		err := tc.a.CheckURL("--corebank-url", tc.url)
		if (err == nil) != tc.want {
			t.Errorf("%s: %v", tc.url, err)
		}
		if err != nil && !strings.Contains(err.Error(), "https://") {
			t.Errorf("%s: %v does not say the fix", tc.url, err)
		}
	}
	if _, err := clientauth.New(clientauth.Options{TokenURL: "http://idp.example/token", ClientID: "svc", ClientSecretFile: secret}); err == nil {
		t.Error("a token URL over plain http on the network was accepted")
	}
	if _, err := clientauth.New(clientauth.Options{TokenURL: "http://127.0.0.1:9/token", ClientID: "svc", ClientSecretFile: secret}); err != nil {
		t.Errorf("a loopback token URL refused: %v", err)
	}
}

// No TLS verification is switched off anywhere in the module: Go's own
// verifier checks every server.
func TestNoVerificationIsSwitchedOff(t *testing.T) {
	root := "../.."
	needle := "Insecure" + "SkipVerify"
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), needle) {
			t.Errorf("%s sets %s", p, needle)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("not at the module's root: %v", err)
	}
}

// Adversarial tests: each FAILS on the code it was written against and
// shows a way the bank connection's security rules are broken.

// A secret with characters that quoting, JSON and HTML escape. An
// identity provider that echoes it in its error answer (the case scrub
// exists for) gets it past scrub in an escaped form: x/oauth2 prints
// error_description with %q, a JSON body keeps its \u escapes, an HTML
// error page its entities.
func TestReviewEchoedSecretInEscapedFormIsNotScrubbed(t *testing.T) {
	const secretValue = `K9"xq\v<z&Zr7-live-2f8a`
	jsonEsc, _ := json.Marshal(secretValue) // "K9\"xq\\v\u003cz\u0026Zr7-live-2f8a"
	for _, tc := range []struct {
		name   string
		ctype  string
		body   func(echo string) string
		leaked string // the form that reaches the error text
	}{
		{"RFC 6749 error_description (oauth2 prints it with %q)", "application/json",
			func(echo string) string {
				b, _ := json.Marshal(map[string]string{"error": "invalid_client", "error_description": "client_secret " + echo + " is not valid"})
				return string(b)
			},
			strings.Trim(strconv.Quote(secretValue), `"`)},
		{"JSON body without an error field", "application/json",
			func(echo string) string {
				b, _ := json.Marshal(map[string]string{"message": "bad client_secret " + echo})
				return string(b)
			},
			strings.Trim(string(jsonEsc), `"`)},
		{"HTML error page", "text/html",
			func(echo string) string {
				return "<html><body><p>Invalid secret: " + html.EscapeString(echo) + "</p></body></html>"
			},
			html.EscapeString(secretValue)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				echo := r.PostForm.Get("client_secret")
				if _, pw, ok := r.BasicAuth(); ok {
					echo, _ = url_unescape(pw)
				}
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, tc.body(echo))
			}))
			defer idp.Close()
			secret := filepath.Join(t.TempDir(), "secret")
			write(t, secret, secretValue+"\n")
			a, err := clientauth.New(clientauth.Options{TokenURL: idp.URL + "/token", ClientID: "svc", ClientSecretFile: secret})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, idp.URL+"/api", nil)
			_, err = a.Client().Do(req)
			if err == nil {
				t.Fatal("no error")
			}
			for what, text := range map[string]string{"request error": err.Error(), "Check()": fmt.Sprint(a.Check())} {
				if strings.Contains(text, tc.leaked) {
					t.Errorf("the client secret (as %s) is in the %s: %s", tc.leaked, what, text)
				}
			}
		})
	}
}

// url_unescape undoes oauth2's QueryEscape of Basic auth's parts.
func url_unescape(s string) (string, error) { return url.QueryUnescape(s) }

// A secret file moved away and back (mv keeps its modification time, and
// its size and mode are unchanged) is never read again: the "no such file"
// error of the moment it was missing sticks, every request fails and
// Check reports the file unreadable until someone edits it — although it
// is back, intact, on disk.
func TestReviewAFileBackInPlaceStaysBroken(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.Header.Get("X-Api-Key")) }))
	defer srv.Close()
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "X-Api-Key: k1\n")
	a, err := clientauth.New(clientauth.Options{HeaderFile: f})
	if err != nil {
		t.Fatal(err)
	}
	get := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := a.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := os.Rename(f, f+".bak"); err != nil { // mv headers headers.bak
		t.Fatal(err)
	}
	_ = get()                                      // fails closed while it is missing: fine
	if err := os.Rename(f+".bak", f); err != nil { // mv headers.bak headers
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := get(); err != nil {
		t.Errorf("the header file is back, unchanged, but every request fails: %v", err)
	}
	if err := a.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// The operator replaces the CA bundle (e.g. the old CA is compromised) but
// the new file does not parse: the old CA silently stays trusted, a server
// it signed is still accepted, and Check (/readyz) says nothing is wrong.
func TestReviewAnUnparsableCABundleKeepsTheOldCATrustedSilently(t *testing.T) {
	oldCA, _ := pki.NewCA("old (compromised) CA")
	srv, caFile, a := pinnedTo(t, oldCA, oldCA, "127.0.0.1")
	c := a.Client()
	c.Timeout = 5 * time.Second
	if resp, err := c.Get(srv.URL); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	time.Sleep(1100 * time.Millisecond)
	// The new bundle, truncated in transit (or a DER file, or a typo).
	newCA, _ := pki.NewCA("new CA")
	write(t, caFile, string(newCA.PEM[:len(newCA.PEM)/2]))
	time.Sleep(1100 * time.Millisecond)
	resp, err := c.Get(srv.URL)
	if resp != nil {
		resp.Body.Close()
	}
	check := a.Check()
	if err == nil && check == nil {
		t.Fatalf("the CA bundle on disk no longer holds the old CA, yet a server it signed is still trusted and Check() = nil")
	}
}

// "Owner-only" is checked on the mode bits alone, never on the owner: run
// as root (as a container often is), a 0600 secret file owned by another
// account — which can read it and rewrite it (its own API key, its own
// token URL answer…) — is accepted.
func TestReviewASecretFileOwnedByAnotherAccountIsAccepted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "X-Api-Key: k1\n")
	if err := os.Chown(f, 65534, 65534); err != nil { // nobody
		t.Fatal(err)
	}
	if _, err := clientauth.New(clientauth.Options{HeaderFile: f}); err == nil {
		t.Fatal("a header file owned by uid 65534 (who can read and rewrite it) was accepted as owner-only")
	}
}

// Check — what /readyz asks on every probe — waits for the token mutex,
// which a token request holds for as long as the identity provider takes
// (up to its 30 s timeout): a slow or tar-pitting token endpoint hangs
// /readyz (and every debit behind it).
func TestReviewCheckHangsBehindASlowTokenRequest(t *testing.T) {
	release := make(chan struct{})
	var asked atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"t","token_type":"Bearer","expires_in":3600}`)
	}))
	defer idp.Close()
	defer close(release)
	secret := filepath.Join(t.TempDir(), "secret")
	write(t, secret, "s3cret\n")
	a, err := clientauth.New(clientauth.Options{TokenURL: idp.URL + "/token", ClientID: "svc", ClientSecretFile: secret})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, idp.URL+"/api", nil)
		if resp, err := a.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); asked.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no token request")
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.Check() }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Check() (/readyz) still blocked after 1s behind the token request")
	}
}

// A line of the header file that names a header the client sets per
// request replaces it on every request: "Idempotency-Key: x" gives every
// debit the same idempotency key (the bank then answers each new charge
// with the first one's result, or refuses them all), silently.
func TestReviewTheHeaderFileOverridesTheIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	bank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"status":"POSTED","reference":"r-%d"}`, len(keys))
	}))
	defer bank.Close()
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "X-Api-Key: k1\nIdempotency-Key: gateway-default\n")
	a, err := clientauth.New(clientauth.Options{HeaderFile: f})
	if err != nil {
		if !strings.Contains(err.Error(), "names Idempotency-Key") {
			t.Fatalf("refused, but not saying why: %v", err)
		}
		return // refused at start: the fix
	}
	c, err := corebank.NewClient(bank.URL, corebank.ClientOptions{HTTPClient: a.Client(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"charge-1", "charge-2"} {
		_, _ = c.Debit(context.Background(), charge.DebitRequest{IdempotencyKey: id, AccountID: "ACC-1",
			Amount: charge.Money{Minor: 100, Currency: "GBP"}, ChargeType: "FEE"})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] != "charge-1" || keys[1] != "charge-2" {
		t.Fatalf("the bank saw idempotency keys %q for charges charge-1 and charge-2 (the header file's value replaced them; it was accepted at start)", keys)
	}
}

// A pinned CA bundle and a client certificate configured, and the bank
// URL written http:// to a host on the network: accepted. Nothing of the
// TLS configuration is used — no server authentication at all — and every
// debit (account, amount) and its answer cross the network in clear, open
// to a forged "POSTED".
func TestReviewAPinnedCAWithAPlainHTTPBankURLIsAccepted(t *testing.T) {
	ca, _ := pki.NewCA("bank CA")
	now := time.Now()
	client, _ := ca.Issue("client", false, now.Add(-time.Hour), now.Add(time.Hour))
	dir := t.TempDir()
	cert, key, _ := client.Write(dir, "client")
	caFile := filepath.Join(dir, "ca.pem")
	write(t, caFile, string(ca.PEM))
	a, err := clientauth.New(clientauth.Options{CAFile: caFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CheckURL("--corebank-url", "http://10.20.30.40:8081"); err == nil {
		t.Fatal("--corebank-ca and --corebank-client-cert with --corebank-url http://10.20.30.40:8081 (no TLS at all) accepted")
	}
}

// Check (/readyz) is blind to a file that vanished while requests flow:
// watched.get reports an error only to the first caller in each second and
// answers every other caller in that second with the last good value and
// nil. Under traffic the request path is that first caller, so the probe
// almost never sees "the CA bundle cannot be read" (the same holds for the
// key, the header file and the client secret).
func TestReviewCheckMissesADeletedFileUnderTraffic(t *testing.T) {
	ca, _ := pki.NewCA("CA")
	srv, caFile, a := pinnedTo(t, ca, ca, "127.0.0.1")
	c := a.Client()
	c.Timeout = 5 * time.Second
	if err := os.Remove(caFile); err != nil {
		t.Fatal(err)
	}
	reported, probes := 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := c.Get(srv.URL); err == nil { // the traffic
			resp.Body.Close()
		}
		probes++
		if a.Check() != nil { // the readiness probe
			reported++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if reported < probes/2 {
		t.Fatalf("the CA bundle is deleted, but Check() reported it in %d of %d probes", reported, probes)
	}
}

// Attacks that HELD (these pass; review_held_test.go before): kept as
// evidence of what was tried.

// get GETs u with c, and says only whether it failed.
func get(t *testing.T, c *http.Client, u string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// A pooled keep-alive connection is not reused once the CA bundle changed
// to one that does not trust the server.
func TestReviewHeldPooledConnectionAfterCARotation(t *testing.T) {
	ca, _ := pki.NewCA("CA")
	other, _ := pki.NewCA("other")
	srv, caFile, a := pinnedTo(t, ca, ca, "127.0.0.1")
	c := a.Client()
	if err := get(t, c, srv.URL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	write(t, caFile, string(other.PEM))
	if err := get(t, c, srv.URL); err == nil {
		t.Fatal("accepted over a pooled connection after the CA changed")
	}
}

// A deleted CA bundle does not make a new transport fall back to the
// system roots (a server of the pinned CA is still trusted; had RootCAs
// gone nil it would be refused).
func TestReviewHeldDeletedCABundleNoSystemRootsFallback(t *testing.T) {
	ca, _ := pki.NewCA("CA")
	srv := tlsServer(t, ca, []string{"127.0.0.1"}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	write(t, caFile, string(ca.PEM))
	now := time.Now()
	cl, _ := ca.Issue("client", false, now.Add(-time.Hour), now.Add(time.Hour))
	cert, key, _ := cl.Write(dir, "client")
	a, err := clientauth.New(clientauth.Options{CAFile: caFile, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	os.Remove(caFile)
	cl2, _ := ca.Issue("client", false, now.Add(-time.Hour), now.Add(time.Hour))
	cl2.Write(dir, "client") // a new transport is made
	time.Sleep(1100 * time.Millisecond)
	if err := get(t, a.Client(), srv.URL); err != nil {
		t.Fatalf("after deletion: %v", err)
	}
}

// The bank's redirect (debit and health probe) is not followed: the
// token and the API key reach nobody else.
func TestReviewHeldBankRedirectNotFollowed(t *testing.T) {
	var thief atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { thief.Add(1) }))
	defer evil.Close()
	bank := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer bank.Close()
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "X-Api-Key: k\n")
	a, _ := clientauth.New(clientauth.Options{HeaderFile: f})
	c, err := corebank.NewClient(bank.URL, corebank.ClientOptions{HTTPClient: a.Client(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Probe(context.Background())
	_, _ = c.Enquire(context.Background(), "k1")
	if thief.Load() != 0 {
		t.Fatal("followed a redirect")
	}
}

// URL tricks around the plain-http rule.
func TestReviewHeldPlainHTTPTricks(t *testing.T) {
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "X-Api-Key: k\n")
	a, _ := clientauth.New(clientauth.Options{HeaderFile: f})
	for u, want := range map[string]bool{
		"HTTP://bank.example":              false,
		"Http://10.0.0.1":                  false,
		"http://127.0.0.1.evil.example":    false,
		"http://localhost.evil":            false,
		"http://localhost.":                false,
		"http://0x7f000001":                false,
		"http://2130706433":                false,
		"http://127.1":                     false,
		"http://[::ffff:127.0.0.1]:1":      true, // truly loopback
		"http://[::1%25eth0]:1":            true, // truly loopback
		"http://localhost%2eevil.example":  false,
		"http://127.0.0.1:80@evil.example": false,
		"  http://bank.example":            false,
	} {
		if err := a.CheckURL("x", u); (err == nil) != want {
			t.Errorf("%s: %v", u, err)
		}
	}
}

// Header-file CR injection and a Host header.
func TestReviewHeldHeaderInjection(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Host + "|" + r.Header.Get("Injected"))
	}))
	defer srv.Close()
	f := filepath.Join(t.TempDir(), "headers")
	write(t, f, "Host: evil.example\nX-A: v\rInjected: yes\n")
	a, err := clientauth.New(clientauth.Options{HeaderFile: f})
	if err != nil {
		return // refused at start: held
	}
	err = get(t, a.Client(), srv.URL)
	if v, _ := got.Load().(string); strings.Contains(v, "evil") || strings.HasSuffix(v, "yes") {
		t.Fatalf("injected: %q", v)
	}
	if err != nil && strings.Contains(err.Error(), "yes") {
		t.Fatalf("value in error: %v", err)
	}
}

// A 0600 symlink to a 0644 file (and the reverse) is judged by its target.
func TestReviewHeldSymlinkedSecret(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	write(t, target, "X-Api-Key: k\n")
	os.Chmod(target, 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if _, err := clientauth.New(clientauth.Options{HeaderFile: link}); err == nil {
		t.Fatal("a symlink to a 0644 file accepted")
	}
	os.Chmod(target, 0o600)
	if _, err := clientauth.New(clientauth.Options{HeaderFile: link}); err != nil {
		t.Fatalf("symlink to 0600: %v", err)
	}
}

// Host-name forms: upper case and a trailing dot are the same name.
func TestReviewHeldHostForms(t *testing.T) {
	ca, _ := pki.NewCA("CA")
	srv, _, a := pinnedTo(t, ca, ca, "localhost")
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for _, h := range []string{"LOCALHOST"} { // "localhost." goes to DNS here (not /etc/hosts): not testable
		if err := get(t, a.Client(), "https://"+h+":"+port); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if err := get(t, a.Client(), "https://127.0.0.1:"+port); err == nil {
		t.Error("IP accepted for a name-only certificate")
	}
}

// Concurrent requests, Check and rotations of every file under -race.
func TestReviewHeldConcurrentRotationRace(t *testing.T) {
	ca, _ := pki.NewCA("CA")
	srv := tlsServer(t, ca, []string{"127.0.0.1"}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	dir := t.TempDir()
	caFile, hdr := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "h")
	write(t, caFile, string(ca.PEM))
	write(t, hdr, "X-Api-Key: k\n")
	now := time.Now()
	cl, _ := ca.Issue("client", false, now.Add(-time.Hour), now.Add(time.Hour))
	cert, key, _ := cl.Write(dir, "client")
	a, err := clientauth.New(clientauth.Options{CAFile: caFile, CertFile: cert, KeyFile: key, HeaderFile: hdr})
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(2500 * time.Millisecond)
	done := make(chan struct{})
	for i := 0; i < 8; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for time.Now().Before(stop) {
				_ = get(t, a.Client(), srv.URL)
				_ = a.Check()
			}
		}()
	}
	for time.Now().Before(stop) {
		c2, _ := ca.Issue("client", false, now.Add(-time.Hour), now.Add(time.Hour))
		c2.Write(dir, "client")
		write(t, caFile, string(ca.PEM)+"\n")
		write(t, hdr, "X-Api-Key: k2\n")
		time.Sleep(300 * time.Millisecond)
	}
	for i := 0; i < 8; i++ {
		<-done
	}
}
