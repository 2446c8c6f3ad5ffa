package clientauth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/clientauth"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
)

func write(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Tokens are cached until shortly before they expire; a 401 drops the
// cached one so that the next request fetches a new one; the header file
// is applied and read again when it changes; the secret is never in an
// error.
func TestTokensHeadersAndRotation(t *testing.T) {
	ti := corebanksim.NewTokenIssuer("svc", "the-secret", time.Hour)
	var reject atomic.Bool
	var lastKey atomic.Value
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastKey.Store(r.Header.Get("X-Api-Key"))
		if reject.Swap(false) {
			w.WriteHeader(http.StatusUnauthorized) // the gateway lost our token
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(corebanksim.Secure(api, ti))
	defer srv.Close()
	dir := t.TempDir()
	secret, headers := filepath.Join(dir, "secret"), filepath.Join(dir, "headers")
	write(t, secret, "the-secret\n")
	write(t, headers, "# gateway key\nX-Api-Key: k1\n")
	a, err := clientauth.New(clientauth.Options{TokenURL: srv.URL + "/oauth/token", ClientID: "svc", ClientSecretFile: secret, HeaderFile: headers})
	if err != nil {
		t.Fatal(err)
	}
	c := a.Client()
	get := func() int {
		resp, err := c.Get(srv.URL + "/v1/ledger")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 3 {
		if code := get(); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if n := ti.Issued(); n != 1 || lastKey.Load() != "k1" {
		t.Fatalf("%d tokens for 3 requests (want 1, cached), key %v", n, lastKey.Load())
	}
	reject.Store(true)
	if code := get(); code != http.StatusUnauthorized {
		t.Fatalf("status %d, want the 401", code)
	}
	time.Sleep(1100 * time.Millisecond) // files are looked at once a second at most
	write(t, headers, "X-Api-Key: k2\n")
	if code := get(); code != 200 || ti.Issued() != 2 || lastKey.Load() != "k2" {
		t.Fatalf("after a 401: status %d, %d tokens issued, key %v; want a new token and the new key", code, ti.Issued(), lastKey.Load())
	}
	if err := a.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}

	// A refused secret: no request is sent, the error says so without the secret.
	write(t, secret, "wrong-secret\n")
	time.Sleep(1100 * time.Millisecond)
	a.Invalidate()
	_, err = c.Get(srv.URL + "/v1/ledger")
	var te *clientauth.TokenError
	if !errors.As(err, &te) || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("err = %v, want a TokenError without the secret", err)
	}
	if err := a.Check(); err == nil || strings.Contains(err.Error(), "wrong-secret") || !strings.Contains(err.Error(), "invalid_client") {
		t.Fatalf("Check = %v", err)
	}
	if !strings.Contains(a.Describe(), secret) || strings.Contains(a.Describe(), "secret\n") {
		t.Fatalf("Describe = %q", a.Describe())
	}
}

func TestBadOptionsAreRefused(t *testing.T) {
	dir := t.TempDir()
	for name, o := range map[string]clientauth.Options{
		"cert without key":       {CertFile: filepath.Join(dir, "c.pem")},
		"oauth without secret":   {TokenURL: "https://idp/token", ClientID: "x"},
		"missing CA file":        {CAFile: filepath.Join(dir, "nope.pem")},
		"CA file that is no PEM": {CAFile: os.Args[0]},
	} {
		if _, err := clientauth.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
