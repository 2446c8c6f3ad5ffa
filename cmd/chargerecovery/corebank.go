package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/corebank"
)

// hostileFlags are the simulator's real-bank misbehaviours, shared by
// corebank and demo.
type hostileFlags struct {
	inProgress409  bool
	slowRate       float64
	slowLatency    time.Duration
	badGatewayRate float64
	resetRate      float64
	outage         string
}

func (h *hostileFlags) bind(f *flagSet, envPrefix string) {
	env := func(name string) string {
		if envPrefix == "" {
			return ""
		}
		return envPrefix + name
	}
	f.Bool(&h.inProgress409, "in-progress-409", env("IN_PROGRESS_409"), false, "answer 409 REQUEST_IN_PROGRESS while an earlier request with the same key is still being processed")
	f.Float(&h.slowRate, "slow-rate", env("SLOW_RATE"), 0, "chance (0-1) that a post takes --slow-latency and posts even after the caller gave up")
	f.Duration(&h.slowLatency, "slow-latency", env("SLOW_LATENCY"), 3*time.Second, "how long a slow post takes")
	f.Float(&h.badGatewayRate, "bad-gateway-rate", env("BAD_GATEWAY_RATE"), 0, "chance (0-1) of posting and then answering 502")
	f.Float(&h.resetRate, "reset-rate", env("RESET_RATE"), 0, "chance (0-1) of posting and then dropping the connection")
	f.String(&h.outage, "outage", env("OUTAGE"), "", "an outage window from start: STATUS:DURATION, e.g. 503:60s or 401:10s (every call and /healthz answer STATUS)")
}

func (h *hostileFlags) apply(p *problems, faults *corebank.FaultsBody) {
	for _, r := range []float64{h.slowRate, h.badGatewayRate, h.resetRate} {
		if r < 0 || r > 1 {
			p.add("fault rates must be within 0-1")
			break
		}
	}
	if h.slowLatency < 0 {
		p.add("--slow-latency must not be negative")
	}
	faults.InProgress409 = h.inProgress409
	faults.SlowRate, faults.SlowMS = h.slowRate, h.slowLatency.Milliseconds()
	faults.BadGatewayAfterPostRate, faults.ResetAfterPostRate = h.badGatewayRate, h.resetRate
	if h.outage != "" {
		st, d, ok := strings.Cut(h.outage, ":")
		status, err1 := strconv.Atoi(st)
		dur, err2 := time.ParseDuration(d)
		if !ok || err1 != nil || err2 != nil || status < 300 || status > 599 || dur <= 0 {
			p.add("--outage %q: want STATUS:DURATION, e.g. 503:60s", h.outage)
			return
		}
		faults.OutageStatus, faults.OutageMS = status, dur.Milliseconds()
	}
}

func runCorebank(ctx context.Context, env *environment, args []string) error {
	f := newFlagSet(env, "corebank", "corebank [flags]")
	var (
		addr, declines string
		faults         corebank.FaultsBody
		latency        time.Duration
		lc             logConfig
	)
	f.String(&addr, "addr", "IC_COREBANK_ADDR", "127.0.0.1:8081", "listen address")
	f.Duration(&latency, "latency", "IC_COREBANK_LATENCY", 0, "added to every debit")
	f.String(&declines, "decline", "IC_COREBANK_DECLINE", "", "accounts to decline permanently: ACCOUNT=CODE,... (e.g. 009999999999=ACCOUNT_CLOSED)")
	f.Float(&faults.TransientRate, "transient-rate", "IC_COREBANK_TRANSIENT_RATE", 0, "chance (0-1) of a 503 before posting")
	f.Float(&faults.TransientAfterPostRate, "lost-response-rate", "IC_COREBANK_LOST_RESPONSE_RATE", 0, "chance (0-1) of posting and then answering 503")
	f.Float(&faults.TimeoutRate, "timeout-rate", "IC_COREBANK_TIMEOUT_RATE", 0, "chance (0-1) of never answering")
	var hf hostileFlags
	hf.bind(f, "IC_COREBANK_")
	lc.bind(f)
	if err := f.parse(args, false); err != nil {
		return err
	}
	var p problems
	lc.check(&p)
	for _, r := range []float64{faults.TransientRate, faults.TransientAfterPostRate, faults.TimeoutRate} {
		if r < 0 || r > 1 {
			p.add("fault rates must be within 0-1")
			break
		}
	}
	if latency < 0 {
		p.add("--latency must not be negative")
	}
	hf.apply(&p, &faults)
	faults.LatencyMS = latency.Milliseconds()
	if declines != "" {
		faults.DeclineAccounts = map[string]string{}
		for _, kv := range strings.Split(declines, ",") {
			acct, code, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || acct == "" || code == "" {
				p.add("--decline %q: want ACCOUNT=CODE", kv)
				continue
			}
			faults.DeclineAccounts[acct] = code
		}
	}
	logged := faults
	logged.DeclineAccounts = nil // account numbers are never logged
	if err := p.err(); err != nil {
		return err
	}
	log := lc.logger(env.stderr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usagef("--addr %s: %v", addr, err)
	}
	srv := &http.Server{Handler: corebank.Handler(corebank.NewLedger(faults.Faults(time.Now()))), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("core-banking simulator listening", slog.String("addr", ln.Addr().String()), slog.Any("faults", logged),
		slog.Int("declined_accounts", len(faults.DeclineAccounts)))
	fmt.Fprintf(env.stdout, "http://%s\n", ln.Addr())
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
