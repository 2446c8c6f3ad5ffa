package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/corebank"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/metrics"
	"github.com/finedge/idempotent-consumer/notify"
)

// consumerConfig is the processing configuration of serve (and demo).
type consumerConfig struct {
	concurrency     int
	visibility      time.Duration
	lease           time.Duration
	retention       time.Duration
	skew            time.Duration
	shutdownTimeout time.Duration
	corebankURL     string
	corebankTimeout time.Duration
	declines        string
	enquiry         bool
	healthPath      string
	circuitAfter    int
	probeEvery      time.Duration
	probeMax        time.Duration
	notifyTimeout   time.Duration
	notifyFailRate  float64
}

func (c *consumerConfig) bind(f *flagSet) {
	f.Int(&c.concurrency, "concurrency", "IC_CONCURRENCY", 16, "messages handled at once")
	f.Duration(&c.visibility, "visibility", "IC_VISIBILITY", 30*time.Second, "the queue's visibility timeout; the heartbeat extends in-flight messages by this every visibility/3")
	f.Duration(&c.lease, "lease", "IC_LEASE", 60*time.Second, "claim lease; a crashed worker's charge is reclaimed after this (at least --visibility)")
	f.Duration(&c.retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long idempotency records are kept (longer than queue retention + DLQ redrive window)")
	f.Duration(&c.skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "a lease is reclaimable only this long after it ends: the largest clock difference between consumer hosts tolerated (keep hosts on NTP)")
	f.Duration(&c.shutdownTimeout, "shutdown-timeout", "IC_SHUTDOWN_TIMEOUT", 30*time.Second, "how long in-flight charges may finish after SIGTERM")
	f.String(&c.corebankURL, "corebank-url", "IC_COREBANK_URL", "", "core-banking debit API base URL, e.g. http://127.0.0.1:8081 (required)")
	f.Duration(&c.corebankTimeout, "corebank-timeout", "IC_COREBANK_TIMEOUT", 10*time.Second, "timeout of one debit call (a timeout is retried with the same idempotency key)")
	f.String(&c.declines, "corebank-declines", "IC_COREBANK_DECLINES", "422:DECLINED", "the bank's answers that mean a final decline, STATUS:ERROR,... (the body's \"error\" field); every other failure is retried with the same key")
	f.Bool(&c.enquiry, "corebank-enquiry", "IC_COREBANK_ENQUIRY", false, "ask GET /v1/debits/{key} before posting a reclaimed charge again (only if the bank offers the status enquiry)")
	f.String(&c.healthPath, "corebank-health-path", "IC_COREBANK_HEALTH_PATH", "/healthz", "what the circuit breaker probes while the bank is down")
	f.Int(&c.circuitAfter, "circuit-failures", "IC_CIRCUIT_FAILURES", 5, "consecutive failed bank calls that open the circuit (stop receiving until a probe answers)")
	f.Duration(&c.probeEvery, "circuit-probe", "IC_CIRCUIT_PROBE", 5*time.Second, "first wait between probes while the circuit is open (doubles per failed probe)")
	f.Duration(&c.probeMax, "circuit-probe-max", "IC_CIRCUIT_PROBE_MAX", 60*time.Second, "longest wait between probes")
	f.Duration(&c.notifyTimeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "how long the pre-debit notification may take; past it the charge is DEBITED_NOTIFICATION_FAILED (never re-debited)")
	f.Float(&c.notifyFailRate, "notify-fail-rate", "IC_NOTIFY_FAIL_RATE", 0, "simulated notification failure rate, 0-1 (the built-in notifier records and logs)")
}

func (c *consumerConfig) check(p *problems, needCorebank bool) {
	if c.concurrency < 1 || c.concurrency > 1000 {
		p.add("--concurrency %d is outside 1-1000", c.concurrency)
	}
	if c.visibility < 3*time.Second || c.visibility > consumer.MaxVisibility {
		p.add("--visibility %s is outside 3s-12h", c.visibility)
	}
	if c.lease < c.visibility {
		p.add("--lease %s must be at least --visibility %s, so that the heartbeat keeps the claim alive", c.lease, c.visibility)
	}
	if c.retention < 24*time.Hour {
		p.add("--retention %s is under 24h: a redelivery could then debit again; keep it longer than the queue's retention plus the DLQ redrive window", c.retention)
	}
	if c.shutdownTimeout <= 0 {
		p.add("--shutdown-timeout must be positive")
	}
	if c.skew < 0 || c.skew >= c.lease {
		p.add("--skew-margin %s must be at least 0 and shorter than --lease %s", c.skew, c.lease)
	}
	if needCorebank && c.corebankURL == "" {
		p.add("--corebank-url (IC_COREBANK_URL) is required: the core-banking debit API, or the simulator (chargerecovery corebank --addr 127.0.0.1:8081)")
	}
	if c.corebankTimeout <= 0 {
		p.add("--corebank-timeout must be positive")
	}
	if _, err := corebank.ParseDeclineRules(c.declines); err != nil {
		p.add("--corebank-declines: %v", err)
	}
	if !strings.HasPrefix(c.healthPath, "/") {
		p.add("--corebank-health-path %q must start with /", c.healthPath)
	}
	if c.circuitAfter < 1 || c.circuitAfter > 1000 {
		p.add("--circuit-failures %d is outside 1-1000", c.circuitAfter)
	}
	if c.probeEvery <= 0 || c.probeMax < c.probeEvery {
		p.add("--circuit-probe must be positive and --circuit-probe-max at least --circuit-probe")
	}
	if c.notifyTimeout <= 0 {
		p.add("--notify-timeout must be positive")
	}
	if c.notifyFailRate < 0 || c.notifyFailRate > 1 {
		p.add("--notify-fail-rate %v is outside 0-1", c.notifyFailRate)
	}
}

// bankPorts are the core-banking adapters of a pipeline.
type bankPorts struct {
	debiter  charge.Debiter
	enquirer charge.Enquirer  // nil: no status enquiry
	breaker  *circuit.Breaker // nil: no circuit breaker
	client   *corebank.Client // the HTTP adapter (ledger reads in the demo)
}

// newBank builds the HTTP client with its circuit breaker for c. The flags
// were checked by consumerConfig.check.
func newBank(c consumerConfig, log *slog.Logger) (bankPorts, error) {
	declines, err := corebank.ParseDeclineRules(c.declines)
	if err != nil {
		return bankPorts{}, usagef("--corebank-declines: %v", err)
	}
	var client *corebank.Client
	breaker, err := circuit.New(circuit.Options{
		Name: "core banking " + c.corebankURL, Threshold: c.circuitAfter, ProbeInterval: c.probeEvery,
		MaxProbeInterval: c.probeMax, ProbeTimeout: c.corebankTimeout, Logger: log,
		Probe: func(ctx context.Context) error { return client.Probe(ctx) },
	})
	if err != nil {
		return bankPorts{}, usagef("%v", err)
	}
	client, err = corebank.NewClient(c.corebankURL, corebank.ClientOptions{
		Timeout: c.corebankTimeout, Declines: declines, Breaker: breaker, HealthPath: c.healthPath})
	if err != nil {
		return bankPorts{}, usagef("--corebank-url: %v", err)
	}
	b := bankPorts{debiter: client, breaker: breaker, client: client}
	if c.enquiry {
		b.enquirer = client
	}
	return b, nil
}

// pipeline wires the service over a backend and the bank.
type pipeline struct {
	guard   *idempotency.Guard
	handler *chargehandler.Handler
	runtime *consumer.Runtime
	breaker *circuit.Breaker
}

// newPipeline wires the service over b. With m set, every port is
// instrumented.
func newPipeline(b *backend, c consumerConfig, bank bankPorts, notifier charge.Notifier, log *slog.Logger,
	m *metrics.Metrics, onResult func(consumer.Message, charge.Charge, charge.Result)) (*pipeline, error) {
	store, source, debiter, enquirer := b.store, b.source, bank.debiter, bank.enquirer
	var onDecision func(consumer.Message, consumer.Decision, time.Duration)
	if m != nil {
		store, source = m.Store(store), m.Source(source)
		debiter, notifier = m.Debiter(debiter), m.Notifier(notifier)
		if enquirer != nil {
			enquirer = m.Enquirer(enquirer)
		}
		onDecision = m.OnDecision
		if bank.breaker != nil {
			m.Circuit(bank.breaker.Status)
		}
	}
	skew := c.skew
	if skew == 0 {
		skew = -1 // the guard's "no margin"
	}
	guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: c.lease, Retention: c.retention, SkewMargin: skew})
	if err != nil {
		return nil, err
	}
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: debiter, Notifier: notifier, Enquirer: enquirer,
		NotifyTimeout: c.notifyTimeout, Logger: log})
	if err != nil {
		return nil, err
	}
	h := chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: log, OnResult: onResult})
	opts := consumer.Options{
		Concurrency:       c.concurrency,
		VisibilityTimeout: c.visibility,
		ShutdownTimeout:   c.shutdownTimeout,
		Logger:            log,
		OnDecision:        onDecision,
	}
	if bank.breaker != nil {
		opts.Gate = bank.breaker
	}
	rt, err := consumer.New(source, h, opts)
	if err != nil {
		return nil, err
	}
	if m != nil {
		m.RuntimeGauges(rt)
	}
	return &pipeline{guard: guard, handler: h, runtime: rt, breaker: bank.breaker}, nil
}

// run consumes until ctx ends, probing the bank while the circuit is open.
func (p *pipeline) run(ctx context.Context) error {
	if p.breaker != nil {
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = p.breaker.Run(pctx) }()
	}
	return p.runtime.Run(ctx)
}

// ready adds the circuit's state to a backend readiness check: an open
// circuit is not ready, and says why.
func (p *pipeline) ready(backendReady func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if p.breaker != nil {
			if s := p.breaker.Status(); s.State == circuit.Open {
				return fmt.Errorf("circuit open: core banking failing since %s (%d consecutive failures; last: %s); not receiving until a probe answers",
					s.OpenedAt.UTC().Format(time.RFC3339), s.Failures, s.LastError)
			}
		}
		return backendReady(ctx)
	}
}

func runServe(ctx context.Context, env *environment, args []string) error {
	f := newFlagSet(env, "serve", "serve [flags]")
	var (
		bc       backendConfig
		cc       consumerConfig
		sc       sweepConfig
		lc       logConfig
		crashAt  string
		httpAddr string
	)
	bc.bind(f)
	cc.bind(f)
	sc.bind(f)
	lc.bind(f)
	f.String(&httpAddr, "http-addr", "IC_HTTP_ADDR", "127.0.0.1:9090", "serve /metrics, /healthz and /readyz here (--http-addr \"\" turns it off)")
	f.String(&crashAt, "crash-at", "IC_CRASH_AT", "", "testing and drills only: SIGKILL this process right after a step: after-claim, after-debit or after-done")
	if err := f.parse(args, false); err != nil {
		return err
	}
	var p problems
	bc.check(&p)
	cc.check(&p, true)
	sc.check(&p)
	lc.check(&p)
	if !validCrashPoint(crashAt) {
		p.add("--crash-at %q is not after-claim, after-debit or after-done", crashAt)
	}
	if err := p.err(); err != nil {
		return err
	}
	log := lc.logger(env.stderr)

	bank, err := newBank(cc, log)
	if err != nil {
		return err
	}
	b, err := openBackend(ctx, bc, cc.visibility, false)
	if err != nil {
		return err
	}
	defer b.close()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = b.ready(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("backend not ready: %w", err)
	}
	rctx, cancel = context.WithTimeout(ctx, 15*time.Second)
	err = checkRetention(rctx, b, cc.retention)
	cancel()
	if err != nil {
		return err
	}
	b.store, bank.debiter = withCrashes(crashAt, b.store, bank.debiter)
	m := metrics.New()
	pl, err := newPipeline(b, cc, bank, notify.NewRecorder(cc.notifyFailRate, log), log, m, nil)
	if err != nil {
		return usagef("%v", err)
	}
	if httpAddr != "" {
		ops, err := startOpsServer(httpAddr, m, pl.ready(b.ready), log)
		if err != nil {
			return err
		}
		defer ops.close()
		log.Info("serving /metrics, /healthz and /readyz", "addr", ops.addr())
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go runSweeper(sweepCtx, b, b.store, sc, log, func(c sweepCounts) { m.Swept(c.Records, c.Messages, c.DLQMessages) })
	log.Info("consumer starting", "backend", b.desc, "concurrency", cc.concurrency,
		"visibility", cc.visibility.String(), "lease", cc.lease.String(), "corebank", cc.corebankURL)
	if err := pl.run(ctx); err != nil {
		return err
	}
	s := pl.runtime.Stats()
	log.Info("consumer stopped", "received", s.Received, "acked", s.Acked, "retried", s.Retried,
		"dead_lettered", s.DeadLettered, "released", s.Released, "ack_errors", s.AckErrors)
	return nil
}
