package console

import (
	"cmp"
	"context"
	"errors"
	"io"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// RunOptions are chargerecovery console's flags: the backend's, the
// console's own, and what its actions need. Defaults (Bind): serve's
// retention, lease and skew margin, the metrics of a consumer on this host
// (http://127.0.0.1:9090/metrics), a 5s notification timeout, and no
// notification channel (renotify then not offered).
type RunOptions struct {
	Backend    backend.Config
	Console    Config
	Notify     pipeline.NotifyConfig
	Log        cli.LogConfig
	Retention  time.Duration
	MetricsURL string
	Timeout    time.Duration
	Addr       string // wins over Console.Addr when given
	Keys       pipeline.Config
	Lease      time.Duration
	Skew       time.Duration
}

// Bind defines the flags on f.
func (o *RunOptions) Bind(f *cli.FlagSet) {
	o.Backend.Bind(f)
	o.Console.Bind(f)
	f.String(&o.Addr, "addr", "", "", "the same as --console-addr (IC_CONSOLE_ADDR); given, it wins")
	o.Notify.Bind(f)
	o.Log.Bind(f)
	f.Duration(&o.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	f.String(&o.MetricsURL, "metrics-url", "IC_METRICS_URL", "http://127.0.0.1:9090/metrics", "a consumer's /metrics, for its circuit state (\"\": skip)")
	f.Duration(&o.Lease, "lease", "IC_LEASE", idempotency.DefaultLease, "reconciliation: the claim a resolve's adoption takes on the record while it writes DONE (as serve's)")
	f.Duration(&o.Skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "reconciliation: a lapsed claim is taken over (and a posted IN_PROGRESS record stops counting as in flight) only this long after it ends (as serve's)")
	o.Keys.BindKeys(f, false) // reconciliation: a resolved break's amount checked against the fingerprint
	f.Duration(&o.Timeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "renotify: how long one notification may take")
}

// Run checks o (every problem at once, a usage error), opens the backend
// as it is (never creating) and serves the console alone until ctx ends
// or the server fails; its log goes to stderr.
func Run(ctx context.Context, o RunOptions, stderr io.Writer) error {
	o.Console.Addr = cmp.Or(o.Addr, o.Console.Addr)
	var p cli.Problems
	o.Backend.Check(&p)
	o.Console.Check(&p)
	o.Log.Check(&p)
	if o.Notify.Channel != "" { // renotify needs a channel; without one it is not offered
		o.Notify.Check(&p)
	}
	if o.Lease <= 0 || o.Skew < 0 {
		p.Add("--lease must be positive, --skew-margin not negative")
	}
	fp, err := o.Keys.Keys()
	if err != nil {
		p.Add("%v", err)
	}
	if o.Retention < 24*time.Hour {
		p.Add("--retention %s is under 24h", o.Retention)
	}
	if err := p.Err(); err != nil {
		return err
	}
	log := o.Log.Logger(stderr)
	o.Backend.Existing = true // the console uses what is there; it never creates
	b, err := backend.Open(ctx, o.Backend, 30*time.Second, false)
	if err != nil {
		return err
	}
	defer b.Close()
	d := Deps{Backend: b, Retention: o.Retention, MetricsURL: o.MetricsURL, Channel: o.Notify.Channel,
		Lease: o.Lease, SkewMargin: pipeline.GuardSkew(o.Skew), Fingerprints: fp}
	if o.Notify.Channel != "" {
		if d.Notifier, _, err = o.Notify.Notifier(ctx, pipeline.Config{NotifyTimeout: o.Timeout}, log); err != nil {
			return err
		}
	}
	s, err := o.Console.Start(ctx, d, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-s.Err():
	}
	return errors.Join(err, s.Close())
}
