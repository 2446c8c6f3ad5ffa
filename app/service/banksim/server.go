package banksim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// ServerOptions are corebank's flags: where the simulator listens (default
// 127.0.0.1:8081), its faults (none by default), its declines, its TLS and
// OAuth2 (off by default; tokens live 5 minutes) and the log.
type ServerOptions struct {
	Addr, Declines string
	Faults         corebanksim.FaultsBody
	Latency        time.Duration
	Hostile        cli.HostileFlags
	Security       corebanksim.Security
	Log            cli.LogConfig
}

// Bind defines the flags on f.
func (o *ServerOptions) Bind(f *cli.FlagSet) {
	f.String(&o.Addr, "addr", "IC_COREBANK_ADDR", "127.0.0.1:8081", "listen address")
	f.Duration(&o.Latency, "latency", "IC_COREBANK_LATENCY", 0, "added to every debit")
	f.String(&o.Declines, "decline", "IC_COREBANK_DECLINE", "", "accounts to decline: ACCOUNT=CODE,... (e.g. 009999999999=ACCOUNT_CLOSED); CODE*N declines only the account's first N debits, then it is funded (e.g. 001234567890=INSUFFICIENT_FUNDS*2)")
	f.Float(&o.Faults.TransientRate, "transient-rate", "IC_COREBANK_TRANSIENT_RATE", 0, "chance (0-1) of a 503 before posting")
	f.Float(&o.Faults.TransientAfterPostRate, "lost-response-rate", "IC_COREBANK_LOST_RESPONSE_RATE", 0, "chance (0-1) of posting and then answering 503")
	f.Float(&o.Faults.TimeoutRate, "timeout-rate", "IC_COREBANK_TIMEOUT_RATE", 0, "chance (0-1) of never answering")
	o.Hostile.Bind(f, "IC_COREBANK_")
	sec := &o.Security
	f.String(&sec.Cert, "tls-cert", "IC_COREBANK_TLS_CERT", "", "serve TLS with this certificate (PEM; with --tls-key)")
	f.String(&sec.Key, "tls-key", "IC_COREBANK_TLS_KEY", "", "the TLS certificate's key (PEM)")
	f.String(&sec.ClientCA, "client-ca", "IC_COREBANK_CLIENT_CA", "", "require client certificates signed by this CA (PEM): mutual TLS")
	f.String(&sec.ClientID, "oauth-client-id", "IC_COREBANK_SIM_OAUTH_CLIENT_ID", "", "serve POST /oauth/token for this client and answer 401 to requests without a valid Bearer token")
	f.String(&sec.SecretFile, "oauth-client-secret-file", "IC_COREBANK_SIM_OAUTH_CLIENT_SECRET_FILE", "", "file holding that client's secret")
	f.Duration(&sec.TokenTTL, "token-ttl", "IC_COREBANK_TOKEN_TTL", 5*time.Minute, "how long an issued token is valid")
	o.Log.Bind(f)
}

// Serve checks the options, listens, prints the simulator's URL on stdout
// (its log goes to stderr) and serves until ctx is done.
func Serve(ctx context.Context, o ServerOptions, stdout, stderr io.Writer) error {
	faults := o.Faults
	var p cli.Problems
	o.Log.Check(&p)
	for _, r := range []float64{faults.TransientRate, faults.TransientAfterPostRate, faults.TimeoutRate} {
		if r < 0 || r > 1 {
			p.Add("fault rates must be within 0-1")
			break
		}
	}
	if o.Latency < 0 {
		p.Add("--latency must not be negative")
	}
	o.Hostile.Apply(&p, &faults)
	faults.LatencyMS = o.Latency.Milliseconds()
	if o.Declines != "" {
		var bad []string
		faults.DeclineAccounts, bad = corebanksim.ParseDeclines(o.Declines)
		for _, kv := range bad {
			p.Add("--decline %q: want ACCOUNT=CODE", kv)
		}
	}
	logged := faults
	logged.DeclineAccounts = nil // account numbers are never logged
	if err := p.Err(); err != nil {
		return err
	}
	log := o.Log.Logger(stderr)
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return cli.Usagef("--addr %s: %w", o.Addr, err)
	}
	handler, tlsConf, err := o.Security.Apply(corebanksim.Handler(corebanksim.NewLedger(faults.Faults(time.Now()))))
	if err != nil {
		ln.Close()
		return cli.Usagef("%w", err)
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	log.Info("core-banking simulator listening", slog.String("addr", ln.Addr().String()), slog.Any("faults", logged),
		slog.Int("declined_accounts", len(faults.DeclineAccounts)))
	fmt.Fprintf(stdout, "%s://%s\n", scheme, ln.Addr())
	return corebanksim.Serve(ctx, ln, handler, tlsConf)
}
