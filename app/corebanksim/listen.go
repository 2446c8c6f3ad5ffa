package corebanksim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/internal/secretfile"
)

// Security makes the simulator demand what a bank's gateway demands: TLS
// with a given certificate, client certificates signed by a given CA, and
// OAuth2 Bearer tokens from its own token endpoint. The fields are the
// files of chargerecovery corebank's flags; all empty: plain HTTP, no
// authentication.
type Security struct {
	Cert, Key, ClientCA  string // PEM files
	ClientID, SecretFile string // OAuth2: the one client, and its secret's file
	TokenTTL             time.Duration
}

// Apply wraps h in the token check s asks for and returns the TLS
// configuration to serve with (nil: plain HTTP); its errors name the
// flags that go wrong. The key and the secret must be owner-only
// (internal/secretfile), as serve's are.
func (s Security) Apply(h http.Handler) (http.Handler, *tls.Config, error) {
	if (s.ClientID == "") != (s.SecretFile == "") {
		return nil, nil, errors.New("--oauth-client-id and --oauth-client-secret-file go together")
	}
	if s.ClientID != "" {
		secret, err := secretfile.Read(s.SecretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--oauth-client-secret-file: %w", err)
		}
		if s.TokenTTL <= 0 {
			return nil, nil, errors.New("--token-ttl must be positive")
		}
		h = Secure(h, NewTokenIssuer(s.ClientID, strings.TrimSpace(string(secret)), s.TokenTTL))
	}
	if (s.Cert == "") != (s.Key == "") || (s.ClientCA != "" && s.Cert == "") {
		return nil, nil, errors.New("--tls-cert and --tls-key go together, and --client-ca needs them")
	}
	if s.Cert == "" {
		return h, nil, nil
	}
	if err := secretfile.Check(s.Key); err != nil {
		return nil, nil, fmt.Errorf("--tls-key: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(s.Cert, s.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if s.ClientCA != "" {
		b, err := os.ReadFile(s.ClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("--client-ca %s: no PEM certificate in it", s.ClientCA)
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return h, conf, nil
}

// ParseDeclines reads ACCOUNT=CODE,… (the accounts to decline
// permanently); bad are the parts that are not ACCOUNT=CODE.
func ParseDeclines(s string) (declines map[string]string, bad []string) {
	declines = map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		acct, code, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || acct == "" || code == "" {
			bad = append(bad, kv)
			continue
		}
		declines[acct] = code
	}
	return declines, bad
}

// Serve serves h on ln (over TLS with conf, if not nil) until it fails or
// ctx ends; then it shuts down, 5s at most for the requests in flight.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, conf *tls.Config) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: conf}
	errc := make(chan error, 1)
	if conf != nil {
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
