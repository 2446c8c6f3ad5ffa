package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func runCorebank(ctx context.Context, env *cli.Env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "ledger":
			return runCorebankLedger(ctx, env, args[1:])
		case "statement":
			return runCorebankStatement(ctx, env, args[1:])
		case "reverse", "drop":
			return runCorebankMark(ctx, env, args[0], args[1:])
		}
	}
	f := cli.NewFlagSet(env, "corebank", "corebank [flags]   (corebank ledger -h: read its ledger; corebank statement -h: export it as a bank statement; corebank reverse|drop -h: have the bank reverse or lose a posting)")
	var (
		addr, declines string
		faults         corebanksim.FaultsBody
		latency        time.Duration
		lc             cli.LogConfig
		sec            corebanksim.Security
	)
	f.String(&addr, "addr", "IC_COREBANK_ADDR", "127.0.0.1:8081", "listen address")
	f.Duration(&latency, "latency", "IC_COREBANK_LATENCY", 0, "added to every debit")
	f.String(&declines, "decline", "IC_COREBANK_DECLINE", "", "accounts to decline: ACCOUNT=CODE,... (e.g. 009999999999=ACCOUNT_CLOSED); CODE*N declines only the account's first N debits, then it is funded (e.g. 001234567890=INSUFFICIENT_FUNDS*2)")
	f.Float(&faults.TransientRate, "transient-rate", "IC_COREBANK_TRANSIENT_RATE", 0, "chance (0-1) of a 503 before posting")
	f.Float(&faults.TransientAfterPostRate, "lost-response-rate", "IC_COREBANK_LOST_RESPONSE_RATE", 0, "chance (0-1) of posting and then answering 503")
	f.Float(&faults.TimeoutRate, "timeout-rate", "IC_COREBANK_TIMEOUT_RATE", 0, "chance (0-1) of never answering")
	var hf cli.HostileFlags
	hf.Bind(f, "IC_COREBANK_")
	f.String(&sec.Cert, "tls-cert", "IC_COREBANK_TLS_CERT", "", "serve TLS with this certificate (PEM; with --tls-key)")
	f.String(&sec.Key, "tls-key", "IC_COREBANK_TLS_KEY", "", "the TLS certificate's key (PEM)")
	f.String(&sec.ClientCA, "client-ca", "IC_COREBANK_CLIENT_CA", "", "require client certificates signed by this CA (PEM): mutual TLS")
	f.String(&sec.ClientID, "oauth-client-id", "IC_COREBANK_SIM_OAUTH_CLIENT_ID", "", "serve POST /oauth/token for this client and answer 401 to requests without a valid Bearer token")
	f.String(&sec.SecretFile, "oauth-client-secret-file", "IC_COREBANK_SIM_OAUTH_CLIENT_SECRET_FILE", "", "file holding that client's secret")
	f.Duration(&sec.TokenTTL, "token-ttl", "IC_COREBANK_TOKEN_TTL", 5*time.Minute, "how long an issued token is valid")
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
		var bad []string
		faults.DeclineAccounts, bad = corebanksim.ParseDeclines(declines)
		for _, kv := range bad {
			p.Add("--decline %q: want ACCOUNT=CODE", kv)
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
	handler, tlsConf, err := sec.Apply(corebanksim.Handler(corebanksim.NewLedger(faults.Faults(time.Now()))))
	if err != nil {
		ln.Close()
		return cli.Usagef("%v", err)
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	log.Info("core-banking simulator listening", slog.String("addr", ln.Addr().String()), slog.Any("faults", logged),
		slog.Int("declined_accounts", len(faults.DeclineAccounts)))
	fmt.Fprintf(env.Stdout, "%s://%s\n", scheme, ln.Addr())
	return corebanksim.Serve(ctx, ln, handler, tlsConf)
}
