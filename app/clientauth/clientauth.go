// Package clientauth is how the service authenticates to an HTTP API that
// a bank runs (the core-banking debit API, a notification webhook): mutual
// TLS with a client certificate, a private CA bundle for the server's
// certificate, OAuth2 client credentials (golang.org/x/oauth2/clientcredentials),
// and static headers for API-key gateways — any combination.
//
// Secrets come only from files, never from flags or their values, and
// every file is read again when it changes on disk (its modification time
// or size), so certificates, CA bundles, client secrets and header files
// rotate without a restart. Nothing here logs or returns a secret: errors
// name the file, not its content.
package clientauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"
	"github.com/finedge/idempotent-consumer/internal/secretfile"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Options say how to authenticate. Zero fields are not used.
type Options struct {
	// CAFile is a PEM bundle of the CAs that sign the server's certificate
	// (instead of the system roots).
	CAFile string
	// CertFile and KeyFile are the client certificate (PEM, its chain
	// after it) and its key, for mutual TLS. Both or neither.
	CertFile, KeyFile string
	// HeaderFile holds lines "Name: value" added to every request (an API
	// key); '#' starts a comment line.
	HeaderFile string
	// OAuth2 client credentials: a token from TokenURL for ClientID and the
	// secret in ClientSecretFile, with Scopes; sent as a Bearer token. The
	// token request uses the same TLS settings (some identity providers
	// require mutual TLS, RFC 8705).
	TokenURL, ClientID, ClientSecretFile string
	Scopes                               []string
	// Now is the clock for certificate expiry. Default time.Now.
	Now func() time.Time
}

// Auth builds authenticated HTTP clients from Options. Safe for concurrent
// use.
type Auth struct {
	o       Options
	ca      *watched[*x509.CertPool]
	cert    *watched[*tls.Certificate]
	headers *watched[http.Header]
	secret  *watched[string]

	mu    sync.Mutex
	tok   *oauth2.Token
	tokAt time.Time // when tok was fetched

	emu      sync.Mutex // guards tokenErr alone: Check never waits for a token request
	tokenErr error      // the last token request's failure, until one succeeds

	tmu     sync.Mutex
	base    *http.Transport
	baseFor string // the certificate and CA versions base was made for
}

// TokenError is a failure to get an OAuth2 token: the request it was for
// was never sent.
type TokenError struct{ Err error }

func (e *TokenError) Error() string { return "oauth2 token: " + e.Err.Error() }
func (e *TokenError) Unwrap() error { return e.Err }

// NotSent reports that the request this token was for never left.
func (e *TokenError) NotSent() bool { return true }

// New reads every file once (so that a missing or unreadable one is a
// configuration error at start) and returns an Auth.
func New(o Options) (*Auth, error) {
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("clientauth: a client certificate needs both the certificate and the key file")
	}
	oauth := o.TokenURL != "" || o.ClientID != "" || o.ClientSecretFile != ""
	if oauth && (o.TokenURL == "" || o.ClientID == "" || o.ClientSecretFile == "") {
		return nil, errors.New("clientauth: OAuth2 client credentials need the token URL, the client id and the client secret file")
	}
	if oauth && !strings.HasPrefix(o.TokenURL, "https://") && !strings.HasPrefix(o.TokenURL, "http://") {
		return nil, fmt.Errorf("clientauth: token URL %q must be http(s)://…", redact.URL(o.TokenURL))
	}
	if oauth && redact.URL(o.TokenURL) != strings.TrimRight(o.TokenURL, "?#") {
		return nil, fmt.Errorf("clientauth: token URL %q holds user info or a query: the client secret goes in its file, not the URL", redact.URL(o.TokenURL))
	}
	if oauth {
		if err := CheckSecretURL("clientauth: token URL", o.TokenURL); err != nil {
			return nil, err
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &Auth{o: o}
	var err error
	if o.CAFile != "" {
		if a.ca, err = watch(o.CAFile, loadCA); err != nil {
			return nil, err
		}
	}
	if o.CertFile != "" {
		if a.cert, err = watch(o.CertFile, func(cert []byte) (*tls.Certificate, error) { return loadCert(cert, o.KeyFile) }, o.KeyFile); err != nil {
			return nil, err
		}
	}
	if o.HeaderFile != "" {
		if a.headers, err = watchSecret(o.HeaderFile, parseHeaders); err != nil {
			return nil, err
		}
	}
	if oauth {
		if a.secret, err = watchSecret(o.ClientSecretFile, func(b []byte) (string, error) {
			s := strings.TrimSpace(string(b))
			if s == "" {
				return "", errors.New("empty")
			}
			return s, nil
		}); err != nil {
			return nil, err
		}
	}
	a.transport()
	return a, nil
}

// transport is the TLS transport for the certificate and CA bundle as
// they are on disk now. When either changed, it is a new transport, and
// the old one's idle connections are closed: a pooled keep-alive
// connection would otherwise go on presenting the old certificate.
func (a *Auth) transport() *http.Transport {
	var v string
	if a.cert != nil {
		v += a.cert.version()
	}
	if a.ca != nil {
		v += "|" + a.ca.version()
	}
	a.tmu.Lock()
	defer a.tmu.Unlock()
	if a.base != nil && a.baseFor == v {
		return a.base
	}
	old := a.base
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	t.TLSClientConfig = a.tlsConfig()
	a.base, a.baseFor = t, v
	if old != nil {
		old.CloseIdleConnections()
	}
	return t
}

// Describe names the mode and the files (never their content), for logs
// and status.
func (a *Auth) Describe() string {
	var parts []string
	if a.o.CertFile != "" {
		parts = append(parts, "mTLS client certificate "+a.o.CertFile)
	}
	if a.o.CAFile != "" {
		parts = append(parts, "CA bundle "+a.o.CAFile)
	}
	if a.o.ClientSecretFile != "" {
		parts = append(parts, fmt.Sprintf("OAuth2 client credentials (client %s, token URL %s, secret file %s)", a.o.ClientID, redact.URL(a.o.TokenURL), a.o.ClientSecretFile))
	}
	if a.o.HeaderFile != "" {
		parts = append(parts, "header file "+a.o.HeaderFile)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// tlsConfig verifies the server with Go's own verifier — chain, expiry,
// and the host name or IP address of the URL (IP SANs for an IP) — against
// the CA bundle as it was read for this transport (a changed bundle makes
// a new transport), and offers the client certificate as it is on disk
// now.
func (a *Auth) tlsConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, Time: a.o.Now}
	if a.cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := a.cert.get()
			if err != nil {
				return nil, err
			}
			return cert, nil
		}
	}
	if a.ca != nil {
		// get cannot fail here: New read the bundle once, and a bundle
		// that later cannot be read keeps its last good value.
		c.RootCAs, _ = a.ca.get()
	}
	return c
}

// Client returns an HTTP client that authenticates every request: TLS as
// configured, the header file's headers, and a Bearer token (fetched and
// cached until shortly before it expires; a 401 answer drops it, so that
// the next request fetches a new one).
func (a *Auth) Client() *http.Client {
	return &http.Client{Transport: &roundTripper{a: a}}
}

type roundTripper struct{ a *Auth }

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	a := rt.a
	r := req.Clone(req.Context())
	if a.headers != nil {
		h, err := a.headers.get()
		if err != nil {
			return nil, err
		}
		for k, vs := range h {
			r.Header[k] = append([]string(nil), vs...)
		}
	}
	if a.secret != nil {
		tok, err := a.token(req.Context())
		if err != nil {
			return nil, err
		}
		r.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	}
	resp, err := a.transport().RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && a.secret != nil {
		a.Invalidate()
	}
	return resp, err
}

// Invalidate drops the cached token: the next request fetches a new one.
func (a *Auth) Invalidate() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tok = nil
}

// token returns a valid cached token or fetches one.
func (a *Auth) token(ctx context.Context) (*oauth2.Token, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != nil && a.tok.AccessToken != "" {
		// Refresh a quarter of its life (at most 30 s) before it expires,
		// so that a request never leaves with a token about to lapse.
		margin := min(a.tok.Expiry.Sub(a.tokAt)/4, 30*time.Second)
		if a.tok.Expiry.IsZero() || a.o.Now().Add(margin).Before(a.tok.Expiry) {
			return a.tok, nil
		}
	}
	secret, err := a.secret.get()
	if err != nil {
		a.setTokenErr(err)
		return nil, &TokenError{Err: err}
	}
	cc := clientcredentials.Config{ClientID: a.o.ClientID, ClientSecret: secret, TokenURL: a.o.TokenURL, Scopes: a.o.Scopes}
	tctx := context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Transport: a.transport(), Timeout: 30 * time.Second,
		CheckRedirect: refuseRedirect})
	fetched := a.o.Now()
	tok, err := cc.Token(tctx)
	if err != nil {
		err = &TokenError{Err: scrub(err, a.o.ClientID, secret)}
		if ctx.Err() == nil { // a request given up is no verdict on the credentials
			a.setTokenErr(err)
		}
		return nil, err
	}
	a.tok, a.tokAt = tok, fetched
	a.setTokenErr(nil)
	return tok, nil
}

func (a *Auth) setTokenErr(err error) {
	a.emu.Lock()
	defer a.emu.Unlock()
	a.tokenErr = err
}

// Check says what is wrong with the credentials now, in words an operator
// can act on (nil when nothing is known to be wrong): an unreadable file,
// a client certificate past its validity, the token endpoint's last
// refusal.
func (a *Auth) Check() error {
	if a.cert != nil {
		cert, err := a.cert.get()
		if err != nil {
			return &CheckError{Summary: "the client certificate or its key cannot be read", Err: err}
		}
		if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
			now := a.o.Now()
			switch {
			case now.After(leaf.NotAfter):
				return &CheckError{Summary: "the client certificate expired", Err: fmt.Errorf("the client certificate %s expired at %s: put a renewed one in place (it is read again when it changes)", a.o.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))}
			case now.Before(leaf.NotBefore):
				return &CheckError{Summary: "the client certificate is not valid yet", Err: fmt.Errorf("the client certificate %s is not valid before %s", a.o.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))}
			}
		}
	}
	if a.ca != nil {
		if err := a.ca.problem(); err != nil {
			return &CheckError{Summary: "the CA bundle cannot be read", Err: err}
		}
	}
	if a.cert != nil {
		if err := a.cert.problem(); err != nil {
			return &CheckError{Summary: "the client certificate or its key cannot be read", Err: err}
		}
	}
	if a.headers != nil {
		if err := a.headers.problem(); err != nil {
			return &CheckError{Summary: "the header file cannot be read", Err: err}
		}
	}
	if a.secret != nil {
		if err := a.secret.problem(); err != nil {
			return &CheckError{Summary: "the client secret file cannot be read", Err: err}
		}
	}
	a.emu.Lock()
	tokenErr := a.tokenErr
	a.emu.Unlock()
	if tokenErr != nil {
		inner := tokenErr
		var te *TokenError
		if errors.As(inner, &te) {
			inner = te.Err
		}
		if why := Explain(inner); why != "" {
			return &CheckError{Summary: why, Err: fmt.Errorf("the token request failed: %s (%v)", why, inner)}
		}
		return &CheckError{Summary: "the token endpoint gave no token",
			Err: fmt.Errorf("the token endpoint gave no token (%v): check the client id and the secret file %s", inner, a.o.ClientSecretFile)}
	}
	return nil
}

// CheckError is why the credentials cannot be used now: Summary in words
// that may be shown to anyone (no file names, no endpoint, nothing the
// identity provider said), Err with the detail for the log.
type CheckError struct {
	Summary string
	Err     error
}

func (e *CheckError) Error() string { return e.Err.Error() }
func (e *CheckError) Unwrap() error { return e.Err }

// Explain turns a transport error into words an operator can act on, or ""
// when it is not one of the authentication failures it knows.
func Explain(err error) string {
	var cve *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	var tokErr *TokenError
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is not signed by a CA we trust: check the CA bundle"
	case errors.As(err, &hostname):
		return "the server's certificate does not name the host we called: check the URL"
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, or not yet valid)"
	case errors.As(err, &cve):
		return "the server's certificate could not be verified"
	case errors.As(err, &alert):
		return "the server refused our TLS handshake (" + alert.Error() + "): our client certificate is missing, expired or not trusted there"
	case errors.As(err, &tokErr):
		return "no OAuth2 token: the token endpoint is down or refused our client credentials"
	}
	return ""
}

// parseHeaders reads "Name: value" lines.
func parseHeaders(b []byte) (http.Header, error) {
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("line %d is not \"Name: value\"", n)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		switch key {
		case "Idempotency-Key", "Content-Type", "Content-Length", "Host", "Transfer-Encoding", "Connection", "Traceparent", "Tracestate":
			return nil, fmt.Errorf("line %d names %s, which every request sets itself: a header file carries credentials only", n, key)
		}
		h.Add(key, strings.TrimSpace(value))
	}
	return h, sc.Err()
}

func loadCA(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

func loadCert(certPEM []byte, keyFile string) (*tls.Certificate, error) {
	key, err := secretfile.Read(keyFile)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	c, err := tls.X509KeyPair(certPEM, key)
	if err != nil {
		return nil, errors.New("the certificate and key do not form a pair, or are not PEM")
	}
	return &c, nil
}

// errRedirect is the token request's answer to a redirect: following it
// would send the client secret to wherever the redirect points.
var errRedirect = errors.New("the token endpoint answered with a redirect: not followed (the client secret is sent to the configured token URL only)")

func refuseRedirect(*http.Request, []*http.Request) error { return errRedirect }

// scrub removes the secret from an error's text in every form the token
// request carries it (an identity provider may echo the request): raw,
// URL-encoded (the form body), and base64 (HTTP Basic authentication of
// "id:secret", raw or with both URL-encoded). The error's chain is dropped
// with it: an errors.As on it could otherwise reach the echoed body.
func scrub(err error, clientID, secret string) error {
	if secret == "" {
		return err
	}
	msg := err.Error()
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), html.EscapeString(secret)}
	// As Go's %q, a JSON string (with and without HTML escaping) and
	// quoted twice over (a JSON log line of a %q error), without the quotes.
	quoted := strconv.Quote(secret)
	forms = append(forms, quoted[1:len(quoted)-1])
	twice := strconv.Quote(quoted)
	forms = append(forms, twice[3:len(twice)-3])
	for _, escapeHTML := range []bool{true, false} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(escapeHTML)
		if enc.Encode(secret) == nil {
			j := strings.TrimSpace(buf.String())
			forms = append(forms, j[1:len(j)-1])
		}
	}
	for _, pair := range []string{clientID + ":" + secret, url.QueryEscape(clientID) + ":" + url.QueryEscape(secret), secret} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			forms = append(forms, enc.EncodeToString([]byte(pair)))
		}
	}
	// The longest forms first: one form may hold another.
	slices.SortFunc(forms, func(x, y string) int { return len(y) - len(x) })
	found := false
	for _, f := range forms {
		if f != "" && strings.Contains(msg, f) {
			msg, found = strings.ReplaceAll(msg, f, "[secret]"), true
		}
	}
	if !found {
		return err
	}
	return errors.New(msg)
}

// SendsSecret is true when requests carry a secret: a header file's
// headers or an OAuth2 bearer token.
func (a *Auth) SendsSecret() bool { return a != nil && (a.headers != nil || a.secret != nil) }

// CheckURL refuses a URL the credentials would be sent to in clear: plain
// http to a host other than this machine's loopback, when requests carry a
// secret. what names the flag in the error.
// A pinned CA or a client certificate with a plain http URL is refused
// too: TLS was asked for, and the URL would silently turn it off.
func (a *Auth) CheckURL(what, raw string) error {
	if !a.SendsSecret() && (a == nil || (a.ca == nil && a.cert == nil)) {
		return nil
	}
	return CheckSecretURL(what, raw)
}

// CheckSecretURL refuses raw as a destination of a secret unless it is
// https, or http to the loopback interface (a sidecar, a test).
func CheckSecretURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s %q is not a URL", what, redact.URL(raw))
	}
	if u.Scheme == "https" {
		return nil
	}
	if u.Scheme == "http" && IsLoopback(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%s %s is plain %s to a host on the network: the credentials (a bearer token, an API key, a client secret) would cross it in clear; use https://", what, redact.URL(raw), u.Scheme)
}

// IsLoopback is true for localhost and the loopback addresses.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
