package clientauth_test

// Attacks that HELD (these pass): kept as evidence of what was tried.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/clientauth"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/internal/pki"
)

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
