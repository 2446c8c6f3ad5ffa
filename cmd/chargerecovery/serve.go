package main

import (
	"context"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/opsserver"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/app/tracing"
	"github.com/finedge/idempotent-consumer/queue"
)

func runServe(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "serve", "serve [flags]")
	var (
		bc              backend.Config
		cc              pipeline.Config
		nc              pipeline.NotifyConfig
		sc              backend.SweepConfig
		lc              cli.LogConfig
		createIfMissing string
		httpAddr        string
		depthTick       time.Duration
		withConsole     bool
		conc            console.Config
	)
	bc.Bind(f)
	bc.BindMultiRegion(f)
	cc.Bind(f)
	nc.Bind(f)
	sc.Bind(f)
	lc.Bind(f)
	f.String(&httpAddr, "http-addr", "IC_HTTP_ADDR", "127.0.0.1:9090", "serve /metrics, /healthz and /readyz here (--http-addr \"\" turns it off)")
	f.Duration(&depthTick, "depth-interval", "IC_DEPTH_INTERVAL", 15*time.Second, "how often the queue depth gauges are sampled (in the background, never on a scrape)")
	f.Bool(&withConsole, "console", "IC_CONSOLE", false, "also serve the operators' console on --console-addr (the --console-* flags; chargerecovery console serves it alone)")
	conc.Bind(f)
	f.String(&createIfMissing, "create-if-missing", "IC_CREATE_IF_MISSING", "", "create and migrate the SQLite file or PostgreSQL schema if needed: true or false (default: true for embedded, false for postgres, where chargerecovery setup does it and serve runs with a least-privilege role)")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	var p cli.Problems
	bc.Check(&p)
	cc.Check(&p, true)
	nc.Check(&p)
	sc.Check(&p)
	lc.Check(&p)
	if withConsole {
		conc.Check(&p)
	}
	if depthTick < time.Second {
		p.Add("--depth-interval %s is under 1s", depthTick)
	}
	switch createIfMissing {
	case "":
		bc.Existing = bc.Kind == backend.Postgres
	case "true", "false":
		bc.Existing = createIfMissing == "false"
	default:
		p.Add("--create-if-missing %q is not true or false", createIfMissing)
	}
	if err := p.Err(); err != nil {
		return err
	}
	bc.Receivers = cc.MostReceivers()
	log := lc.Logger(env.Stderr)
	bc.Log = log // the AWS SDK's own lines, at debug

	bank, err := pipeline.NewBank(cc, log)
	if err != nil {
		return err
	}
	b, err := backend.Open(ctx, bc, cc.Visibility, false)
	if err != nil {
		return err
	}
	defer b.Close()
	for _, w := range b.Warnings {
		log.Warn(w)
	}
	for _, n := range b.Notes {
		log.Info(n)
	}
	if err := b.Preflight(ctx, cc.Retention); err != nil {
		return err
	}
	if err := checkWindowRetention(ctx, cc, b); err != nil {
		return err
	}
	if bc.Kind == backend.AWS {
		if err := checkWaitRetention(ctx, cc, b); err != nil {
			return err
		}
	}
	if env.Drill != nil { // a test binary's crash drill; never set in production
		b.Queue, b.Store, bank.Debiter = env.Drill(b.Queue, b.Store, bank.Debiter)
	}
	tp, stopTracing, err := tracing.Setup(ctx, env.Getenv, env.Stderr)
	if err != nil {
		return cli.Usagef("tracing: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx)
	}()
	notifier, notifyDesc, err := nc.Notifier(ctx, cc, log)
	if err != nil {
		return err
	}
	m := metrics.New()
	pl, err := pipeline.New(pipeline.Ports{Source: b.Queue, Store: b.Store, Bank: bank, Notifier: notifier},
		cc, pipeline.Options{Logger: log, Metrics: m, Tracer: tp, NotifyChannel: nc.Channel})
	if err != nil {
		return cli.Usagef("%v", err)
	}
	pl.LogCalendar(log, cc.HolidaysFile, time.Now())
	metricsURL := ""
	if httpAddr != "" {
		ops, err := opsserver.Start(httpAddr, m, pl.Ready(b.Ready), log)
		if err != nil {
			return err
		}
		defer ops.Close()
		log.Info("serving /metrics, /healthz and /readyz", "addr", ops.Addr())
		metricsURL = ops.MetricsURL()
	}
	if withConsole {
		fp, err := cc.Keys()
		if err != nil {
			return cli.Usagef("%v", err)
		}
		cs, err := conc.Start(ctx, console.Deps{Backend: b, Retention: cc.Retention, MetricsURL: metricsURL, Notifier: notifier, Channel: nc.Channel,
			Lease: cc.Lease, SkewMargin: noneIfZero(cc.Skew), Fingerprints: fp}, log)
		if err != nil {
			return err
		}
		defer cs.Close()
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	backend.Watch(sweepCtx, b, sc, m, depthTick, log)
	log.Info("consumer starting", "backend", b.Desc, "concurrency", cc.Concurrency,
		"visibility", cc.Visibility.String(), "lease", cc.Lease.String(), "corebank", redact.URL(cc.CorebankURL), "corebank_auth", bank.AuthDesc(), "notify", notifyDesc,
		"fingerprint_key", cc.KeyDesc(), "claims", pl.ClaimsDesc())
	if err := pl.Run(ctx); err != nil {
		return err
	}
	s := pl.Runtime.Stats()
	log.Info("consumer stopped", "received", s.Received, "acked", s.Acked, "retried", s.Retried,
		"dead_lettered", s.DeadLettered, "released", s.Released, "ack_errors", s.AckErrors)
	return nil
}

// checkWaitRetention refuses, on SQS, a recovery policy whose waits the
// queue cannot keep (queue.CheckWaitWithinQueue): serve starts a waiting
// message over (a copy sent at its second receive), so only its first
// hide, up to SQS's 12 hours, and two receives must fit. (The SQL queues
// restart a waiting message's age at its due time.)
func checkWaitRetention(ctx context.Context, cc pipeline.Config, b *backend.Backend) error {
	retry, err := cc.RetryPolicy()
	if err != nil {
		return cli.Usagef("--retry-declines: %v", err)
	}
	var waits []time.Duration
	if cc.NoticeLead > 0 {
		waits = append(waits, cc.NoticeLead)
	}
	if waits = append(waits, retry.LongestWaits()...); len(waits) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	retention, _, err := b.Retentions(rctx)
	if err != nil {
		return fmt.Errorf("read the queue's retention: %w", err)
	}
	receives, err := b.MaxReceives(rctx)
	if err != nil {
		return fmt.Errorf("read the queue's maxReceiveCount: %w", err)
	}
	if err := queue.CheckWaitWithinQueue(waits, retention, receives, queue.MaxVisibility, true); err != nil {
		return cli.Usagef("--retry-declines / --notice-lead on this queue: %v", err)
	}
	return nil
}

// checkWindowRetention refuses posting windows closed longer than the
// queue keeps a message (pipeline.CheckWindowRetention).
func checkWindowRetention(ctx context.Context, cc pipeline.Config, b *backend.Backend) error {
	cal, err := cc.Calendar()
	if err != nil || cal == nil {
		return err // Check reported a bad calendar already
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	retention, _, err := b.Retentions(rctx)
	if err != nil {
		return fmt.Errorf("read the queue's retention: %w", err)
	}
	return pipeline.CheckWindowRetention(cal, retention, time.Now())
}
