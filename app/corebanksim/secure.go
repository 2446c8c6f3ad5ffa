package corebanksim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebank"
)

// TokenIssuer is the simulator's OAuth2 token endpoint (client credentials
// grant, RFC 6749 §4.4): it issues short-lived Bearer tokens to one client
// and checks them, like a bank's identity provider and API gateway.
type TokenIssuer struct {
	clientID, secret string
	ttl              time.Duration
	now              func() time.Time

	mu     sync.Mutex
	tokens map[string]time.Time // token → expiry
	issued int
	asked  int             // token requests received
	serial map[string]bool // client certificate serials seen (mTLS)
}

// NewTokenIssuer issues tokens valid for ttl to clientID with secret.
func NewTokenIssuer(clientID, secret string, ttl time.Duration) *TokenIssuer {
	return &TokenIssuer{clientID: clientID, secret: secret, ttl: ttl, now: time.Now, tokens: map[string]time.Time{}, serial: map[string]bool{}}
}

// Issued counts the tokens issued.
func (ti *TokenIssuer) Issued() int {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return ti.issued
}

// Requests counts the token requests received (issued or refused).
func (ti *TokenIssuer) Requests() int {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return ti.asked
}

// Serials returns the serial numbers of the client certificates seen.
func (ti *TokenIssuer) Serials() []string {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	var out []string
	for s := range ti.serial {
		out = append(out, s)
	}
	return out
}

func (ti *TokenIssuer) token(w http.ResponseWriter, r *http.Request) {
	ti.mu.Lock()
	ti.asked++
	ti.mu.Unlock()
	id, secret, ok := r.BasicAuth()
	if !ok {
		_ = r.ParseForm()
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	_ = r.ParseForm()
	if r.PostForm.Get("grant_type") != "client_credentials" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
		return
	}
	if subtle.ConstantTimeCompare([]byte(id), []byte(ti.clientID)) != 1 || subtle.ConstantTimeCompare([]byte(secret), []byte(ti.secret)) != 1 {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	ti.mu.Lock()
	ti.tokens[tok] = ti.now().Add(ti.ttl)
	ti.issued++
	ti.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(ti.ttl.Seconds())})
}

func (ti *TokenIssuer) valid(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	ti.mu.Lock()
	defer ti.mu.Unlock()
	exp, ok := ti.tokens[tok]
	return ok && ti.now().Before(exp)
}

// Secure puts h behind the token issuer: POST /oauth/token issues tokens;
// every other path but GET /healthz answers 401 without a valid Bearer
// token. With mutual TLS (the server's tls.Config requiring client
// certificates) it records each client certificate's serial.
func Secure(h http.Handler, ti *TokenIssuer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			ti.mu.Lock()
			ti.serial[r.TLS.PeerCertificates[0].SerialNumber.String()] = true
			ti.mu.Unlock()
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/oauth/token":
			ti.token(w, r)
		case r.URL.Path == "/healthz" || ti.valid(r):
			h.ServeHTTP(w, r)
		default:
			writeJSON(w, http.StatusUnauthorized, corebank.ErrorResponse{Error: "UNAUTHORIZED", Message: "a valid Bearer token is required"})
		}
	})
}
