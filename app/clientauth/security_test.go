package clientauth_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/clientauth"
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
