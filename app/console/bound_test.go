package console

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
)

// olgaSignsIn is a token file with olga's operator token, the sign-in
// that reads it, and an audit log in a directory of the test's own.
func olgaSignsIn(t *testing.T) (*TokenAuth, *AuditLog) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(TokenLine("olga", Operator, "olga-0123456789abcdef", "")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := NewTokenAuth(TokenOptions{File: tokens})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := OpenAuditLog(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	return auth, audit
}

// 1,000 client addresses keep at most MaxClients rate limiters and counts,
// and every refused sign-in is still counted in the summary.
func TestRateLimitersAndRefusalCountsAreBounded(t *testing.T) {
	auth, audit := olgaSignsIn(t)
	c, err := New(Options{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), Auth: auth, Audit: audit, MaxClients: 50,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	for i := range 1000 {
		req := httptest.NewRequest("POST", "/signin", strings.NewReader(url.Values{"token": {"wrong-0123456789abcdef"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "127.0.0.1:4000"
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.1", i/250, i%250))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, rec.Code)
		}
	}
	if n, m := c.limiters.Len(), c.refused.Len(); n > 50 || m > 50 {
		t.Fatalf("%d limiters and %d refusal counts kept, want at most 50", n, m)
	}
	total := c.refusedElsewhere
	for _, k := range c.refused.Keys() {
		n, _ := c.refused.Peek(k)
		total += n.count
	}
	if total != 1000 {
		t.Fatalf("%d refused sign-ins counted, want 1000", total)
	}
}
