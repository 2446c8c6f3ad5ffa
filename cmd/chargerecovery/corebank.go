package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/corebank"
	"github.com/finedge/idempotent-consumer/internal/cli"
)

func runCorebank(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "corebank", "corebank [flags]")
	var (
		addr, declines string
		faults         corebank.FaultsBody
		latency        time.Duration
		lc             cli.LogConfig
	)
	f.String(&addr, "addr", "IC_COREBANK_ADDR", "127.0.0.1:8081", "listen address")
	f.Duration(&latency, "latency", "IC_COREBANK_LATENCY", 0, "added to every debit")
	f.String(&declines, "decline", "IC_COREBANK_DECLINE", "", "accounts to decline permanently: ACCOUNT=CODE,... (e.g. 009999999999=ACCOUNT_CLOSED)")
	f.Float(&faults.TransientRate, "transient-rate", "IC_COREBANK_TRANSIENT_RATE", 0, "chance (0-1) of a 503 before posting")
	f.Float(&faults.TransientAfterPostRate, "lost-response-rate", "IC_COREBANK_LOST_RESPONSE_RATE", 0, "chance (0-1) of posting and then answering 503")
	f.Float(&faults.TimeoutRate, "timeout-rate", "IC_COREBANK_TIMEOUT_RATE", 0, "chance (0-1) of never answering")
	var hf cli.HostileFlags
	hf.Bind(f, "IC_COREBANK_")
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
	srv := &http.Server{Handler: corebank.Handler(corebank.NewLedger(faults.Faults(time.Now()))), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("core-banking simulator listening", slog.String("addr", ln.Addr().String()), slog.Any("faults", logged),
		slog.Int("declined_accounts", len(faults.DeclineAccounts)))
	fmt.Fprintf(env.Stdout, "http://%s\n", ln.Addr())
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
