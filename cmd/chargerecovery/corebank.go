package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/corebanksim"
	"github.com/finedge/idempotent-consumer/service/cli"
)

func runCorebank(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "corebank", "corebank [flags]")
	var (
		addr, declines string
		faults         corebanksim.FaultsBody
		latency        time.Duration
		lc             cli.LogConfig
		sec            simSecurity
	)
	f.String(&addr, "addr", "IC_COREBANK_ADDR", "127.0.0.1:8081", "listen address")
	f.Duration(&latency, "latency", "IC_COREBANK_LATENCY", 0, "added to every debit")
	f.String(&declines, "decline", "IC_COREBANK_DECLINE", "", "accounts to decline permanently: ACCOUNT=CODE,... (e.g. 009999999999=ACCOUNT_CLOSED)")
	f.Float(&faults.TransientRate, "transient-rate", "IC_COREBANK_TRANSIENT_RATE", 0, "chance (0-1) of a 503 before posting")
	f.Float(&faults.TransientAfterPostRate, "lost-response-rate", "IC_COREBANK_LOST_RESPONSE_RATE", 0, "chance (0-1) of posting and then answering 503")
	f.Float(&faults.TimeoutRate, "timeout-rate", "IC_COREBANK_TIMEOUT_RATE", 0, "chance (0-1) of never answering")
	var hf cli.HostileFlags
	hf.Bind(f, "IC_COREBANK_")
	sec.bind(f)
	lc.Bind(f)
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	lc.Check(&p)
	for _, r := range []float64{faults.TransientRate, faults.TransientAfterPostRate, faults.TimeoutRate} {
		if r < 0 || r > 1 {
			p.Add("fault rates must be within 0-1")
			break
		}
	}
	if latency < 0 {
		p.Add("--latency must not be negative")
	}
	hf.Apply(&p, &faults)
	faults.LatencyMS = latency.Milliseconds()
	if declines != "" {
		faults.DeclineAccounts = map[string]string{}
		for _, kv := range strings.Split(declines, ",") {
			acct, code, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || acct == "" || code == "" {
				p.Add("--decline %q: want ACCOUNT=CODE", kv)
				continue
			}
			faults.DeclineAccounts[acct] = code
		}
	}
	logged := faults
	logged.DeclineAccounts = nil // account numbers are never logged
	if err := p.Err(); err != nil {
		return err
	}
	log := lc.Logger(env.Stderr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return cli.Usagef("--addr %s: %v", addr, err)
	}
	var handler http.Handler = corebanksim.Handler(corebanksim.NewLedger(faults.Faults(time.Now())))
	handler, tlsConf, err := sec.apply(handler)
	if err != nil {
		ln.Close()
		return cli.Usagef("%v", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
	errc := make(chan error, 1)
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Info("core-banking simulator listening", slog.String("addr", ln.Addr().String()), slog.Any("faults", logged),
		slog.Int("declined_accounts", len(faults.DeclineAccounts)))
	fmt.Fprintf(env.Stdout, "%s://%s\n", scheme, ln.Addr())
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

// simSecurity makes the simulator demand what a bank's gateway demands:
// TLS with a given certificate, client certificates signed by a given CA,
// and OAuth2 Bearer tokens from its own token endpoint.
type simSecurity struct {
	cert, key, clientCA  string
	clientID, secretFile string
	tokenTTL             time.Duration
}

func (s *simSecurity) bind(f *cli.FlagSet) {
	f.String(&s.cert, "tls-cert", "IC_COREBANK_TLS_CERT", "", "serve TLS with this certificate (PEM; with --tls-key)")
	f.String(&s.key, "tls-key", "IC_COREBANK_TLS_KEY", "", "the TLS certificate's key (PEM)")
	f.String(&s.clientCA, "client-ca", "IC_COREBANK_CLIENT_CA", "", "require client certificates signed by this CA (PEM): mutual TLS")
	f.String(&s.clientID, "oauth-client-id", "IC_COREBANK_SIM_OAUTH_CLIENT_ID", "", "serve POST /oauth/token for this client and answer 401 to requests without a valid Bearer token")
	f.String(&s.secretFile, "oauth-client-secret-file", "IC_COREBANK_SIM_OAUTH_CLIENT_SECRET_FILE", "", "file holding that client's secret")
	f.Duration(&s.tokenTTL, "token-ttl", "IC_COREBANK_TOKEN_TTL", 5*time.Minute, "how long an issued token is valid")
}

func (s *simSecurity) apply(h http.Handler) (http.Handler, *tls.Config, error) {
	if (s.clientID == "") != (s.secretFile == "") {
		return nil, nil, errors.New("--oauth-client-id and --oauth-client-secret-file go together")
	}
	if s.clientID != "" {
		secret, err := os.ReadFile(s.secretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--oauth-client-secret-file: %w", err)
		}
		if s.tokenTTL <= 0 {
			return nil, nil, errors.New("--token-ttl must be positive")
		}
		h = corebanksim.Secure(h, corebanksim.NewTokenIssuer(s.clientID, strings.TrimSpace(string(secret)), s.tokenTTL))
	}
	if (s.cert == "") != (s.key == "") || (s.clientCA != "" && s.cert == "") {
		return nil, nil, errors.New("--tls-cert and --tls-key go together, and --client-ca needs them")
	}
	if s.cert == "" {
		return h, nil, nil
	}
	pair, err := tls.LoadX509KeyPair(s.cert, s.key)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if s.clientCA != "" {
		b, err := os.ReadFile(s.clientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("--client-ca %s: no PEM certificate in it", s.clientCA)
		}
		conf.ClientCAs, conf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return h, conf, nil
}
