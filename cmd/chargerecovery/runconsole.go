package main

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// runConsole serves the console alone, on the backend's flags.
func runConsole(ctx context.Context, env *cli.Env, args []string) error {
	f := cli.NewFlagSet(env, "console", "console [flags]")
	var (
		bc         backend.Config
		cc         console.Config
		nc         pipeline.NotifyConfig
		lc         cli.LogConfig
		retention  time.Duration
		metricsURL string
		timeout    time.Duration
		addr       string
		keys       pipeline.Config
		lease      time.Duration
		skew       time.Duration
	)
	bc.Bind(f)
	cc.Bind(f)
	f.String(&addr, "addr", "", "", "the same as --console-addr (IC_CONSOLE_ADDR); given, it wins")
	nc.Bind(f)
	lc.Bind(f)
	f.Duration(&retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	f.String(&metricsURL, "metrics-url", "IC_METRICS_URL", "http://127.0.0.1:9090/metrics", "a consumer's /metrics, for its circuit state (\"\": skip)")
	f.Duration(&lease, "lease", "IC_LEASE", idempotency.DefaultLease, "reconciliation: the claim a resolve's adoption takes on the record while it writes DONE (as serve's)")
	f.Duration(&skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "reconciliation: a lapsed claim is taken over (and a posted IN_PROGRESS record stops counting as in flight) only this long after it ends (as serve's)")
	keys.BindKeys(f) // reconciliation: a resolved break's amount checked against the fingerprint
	f.Duration(&timeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "renotify: how long one notification may take")
	if err := f.Parse(args, false); err != nil {
		return err
	}
	cc.Addr = cmp.Or(addr, cc.Addr)
	var p cli.Problems
	bc.Check(&p)
	cc.Check(&p)
	lc.Check(&p)
	if nc.Channel != "" { // renotify needs a channel; without one it is not offered
		nc.Check(&p)
	}
	if lease <= 0 || skew < 0 {
		p.Add("--lease must be positive, --skew-margin not negative")
	}
	fp, err := keys.Keys()
	if err != nil {
		p.Add("%v", err)
	}
	if retention < 24*time.Hour {
		p.Add("--retention %s is under 24h", retention)
	}
	if err := p.Err(); err != nil {
		return err
	}
	log := lc.Logger(env.Stderr)
	bc.Existing = true // the console uses what is there; it never creates
	b, err := backend.Open(ctx, bc, 30*time.Second, false)
	if err != nil {
		return err
	}
	defer b.Close()
	d := console.Deps{Backend: b, Retention: retention, MetricsURL: metricsURL, Channel: nc.Channel,
		Lease: lease, SkewMargin: pipeline.GuardSkew(skew), Fingerprints: fp}
	if nc.Channel != "" {
		if d.Notifier, _, err = nc.Notifier(ctx, pipeline.Config{NotifyTimeout: timeout}, log); err != nil {
			return err
		}
	}
	s, err := cc.Start(ctx, d, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-s.Err():
	}
	return errors.Join(err, s.Close())
}
