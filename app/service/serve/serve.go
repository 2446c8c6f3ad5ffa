// Package serve is chargerecovery serve: its flags, their checks, and the
// run — open the backend, check it can keep what the policy asks, wire
// the pipeline, start the ops endpoint (and the console, given), sweep,
// and consume until the context ends.
package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/opsserver"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/app/tracing"
	"github.com/finedge/idempotent-consumer/internal/redact"
	"github.com/finedge/idempotent-consumer/queue"
)

// Options are serve's flags. Defaults (Bind): the ops endpoint on
// 127.0.0.1:9090, depth gauges sampled every 15s, no console, and
// CreateIfMissing "" (create and migrate for embedded, not for postgres).
type Options struct {
	Backend         backend.Config
	Pipeline        pipeline.Config
	Notify          pipeline.NotifyConfig
	Sweep           backend.SweepConfig
	Log             cli.LogConfig
	CreateIfMissing string
	HTTPAddr        string
	DepthInterval   time.Duration
	// Console says whether the operators' console runs beside the
	// consumer (Run then needs a Console).
	Console bool
}

// Console is the operators' console as serve --console starts it: its
// flags' checks, and its start once the consumer's parts are there.
type Console interface {
	Check(p *cli.Problems)
	Start(ctx context.Context, parts Parts) (io.Closer, error)
}

// Parts are what serve opened that a console beside it shares.
type Parts struct {
	Backend    *backend.Backend
	Notifier   charge.Notifier
	MetricsURL string // "" without an ops endpoint
	Log        *slog.Logger
	// Pipeline and Channel are serve's checked configuration and its
	// notification channel.
	Pipeline pipeline.Config
	Channel  string
}

// Bind defines serve's flags on f (the console's are its own).
func (o *Options) Bind(f *cli.FlagSet) {
	o.Backend.Bind(f)
	o.Backend.BindMultiRegion(f)
	o.Pipeline.Bind(f)
	o.Notify.Bind(f)
	o.Sweep.Bind(f)
	o.Log.Bind(f)
	f.String(&o.HTTPAddr, "http-addr", "IC_HTTP_ADDR", "127.0.0.1:9090", "serve /metrics, /healthz and /readyz here (--http-addr \"\" turns it off)")
	f.Duration(&o.DepthInterval, "depth-interval", "IC_DEPTH_INTERVAL", 15*time.Second, "how often the queue depth gauges are sampled (in the background, never on a scrape)")
	f.Bool(&o.Console, "console", "IC_CONSOLE", false, "also serve the operators' console on --console-addr (the --console-* flags; chargerecovery console serves it alone)")
	f.String(&o.CreateIfMissing, "create-if-missing", "IC_CREATE_IF_MISSING", "", "create and migrate the SQLite file or PostgreSQL schema if needed: true or false (default: true for embedded, false for postgres, where chargerecovery setup does it and serve runs with a least-privilege role)")
}

// check reports every problem of o at once (a usage error) and settles
// what the backend may create.
func (o *Options) check(con Console) error {
	var p cli.Problems
	o.Backend.Check(&p)
	o.Pipeline.Check(&p, true)
	o.Notify.Check(&p)
	o.Sweep.Check(&p)
	o.Log.Check(&p)
	if o.Console {
		con.Check(&p)
	}
	if o.DepthInterval < time.Second {
		p.Add("--depth-interval %s is under 1s", o.DepthInterval)
	}
	switch o.CreateIfMissing {
	case "":
		o.Backend.Existing = o.Backend.Kind == backend.Postgres
	case "true", "false":
		o.Backend.Existing = o.CreateIfMissing == "false"
	default:
		p.Add("--create-if-missing %q is not true or false", o.CreateIfMissing)
	}
	return p.Err()
}

// Run checks o and runs the consumer until ctx ends: its log goes to
// env.Stderr, env.Getenv configures tracing, and env.Drill (a test
// binary's only) wraps its parts. con is needed only with o.Console.
func Run(ctx context.Context, env *cli.Env, o Options, con Console) error {
	if err := o.check(con); err != nil {
		return err
	}
	bc, cc, nc := o.Backend, o.Pipeline, o.Notify
	bc.Receivers = cc.MostReceivers()
	log := o.Log.Logger(env.Stderr)
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
	if err := checkWindowRetention(ctx, cc, b, time.Now()); err != nil {
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
		return cli.Usagef("tracing: %w", err)
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
		return cli.Usagef("%w", err)
	}
	pl.LogCalendar(log, cc.HolidaysFile, time.Now())
	metricsURL := ""
	if o.HTTPAddr != "" {
		ops, err := opsserver.Start(o.HTTPAddr, m, pl.Ready(b.Ready), log)
		if err != nil {
			return err
		}
		defer ops.Close()
		log.Info("serving /metrics, /healthz and /readyz", "addr", ops.Addr())
		metricsURL = ops.MetricsURL()
	}
	if o.Console {
		cs, err := con.Start(ctx, Parts{Backend: b, Notifier: notifier, MetricsURL: metricsURL, Log: log, Pipeline: cc, Channel: nc.Channel})
		if err != nil {
			return err
		}
		defer cs.Close()
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	backend.Watch(sweepCtx, b, o.Sweep, m, o.DepthInterval, log)
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
		return cli.Usagef("--retry-declines: %w", err)
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
		return cli.Usagef("--retry-declines / --notice-lead on this queue: %w", err)
	}
	return nil
}

// checkWindowRetention refuses posting windows closed longer than the
// queue keeps a message (pipeline.CheckWindowRetention).
func checkWindowRetention(ctx context.Context, cc pipeline.Config, b *backend.Backend, now time.Time) error {
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
	return pipeline.CheckWindowRetention(cal, retention, now)
}
