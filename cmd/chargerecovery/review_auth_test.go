package main

// Adversarial end-to-end tests: each FAILS on the code it was written
// against.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/internal/pki"
)

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
