package operate

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// RenotifyFlags are renotify's flags. Defaults (Bind): at most 1,000
// with --all, a 5s send, a 1m claim of each notice, serve's retention and
// skew margin, and a reason saying a missed notice was resent.
type RenotifyFlags struct {
	All, DryRun                     bool
	Reason                          string
	Limit                           int
	Timeout, Lease, Skew, Retention time.Duration
	Notify                          pipeline.NotifyConfig
	Log                             cli.LogConfig
}

// Bind defines the flags on f.
func (r *RenotifyFlags) Bind(f *cli.FlagSet) {
	f.Bool(&r.All, "all", "", false, "every DEBITED_NOTIFICATION_FAILED record (oldest first, at most --limit)")
	f.Bool(&r.DryRun, "dry-run", "", false, "list what would be sent; send nothing, change nothing")
	f.String(&r.Reason, "reason", "", "missed pre-debit notification resent", "why (kept in each record's history and the audit log), e.g. \"INC-77: SMS gateway back\"")
	f.Int(&r.Limit, "limit", "", 1000, "with --all: at most this many")
	f.Duration(&r.Timeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "how long one notification may take")
	f.Duration(&r.Lease, "lease", "", time.Minute, "how long a run holds the claim of a notice it sends (at least twice --notify-timeout): another run at once skips that notice; one that stopped is taken over after this")
	f.Duration(&r.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long a notice's claim is kept (as serve's records)")
	f.Duration(&r.Skew, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "a lapsed claim is taken over only this long after it ends (the largest clock difference between hosts)")
	r.Notify.Bind(f)
	r.Log.Bind(f)
}

// Check checks the charge ids given (or --all) and the flags; the
// notification channel only when something is to be sent.
func (r *RenotifyFlags) Check(ids []string) error {
	switch {
	case r.All && len(ids) > 0:
		return cli.Usagef("give CHARGE_IDs or --all, not both")
	case !r.All && len(ids) == 0:
		return cli.Usagef("give the CHARGE_IDs to notify again, or --all")
	case r.Limit < 1 || r.Timeout <= 0:
		return cli.Usagef("--limit and --notify-timeout must be positive")
	case r.Lease < 2*r.Timeout:
		return cli.Usagef("--lease %s must be at least twice --notify-timeout %s: a notice's claim must outlast its send", r.Lease, r.Timeout)
	case r.Retention <= 0:
		return cli.Usagef("--retention must be positive")
	case r.Skew < 0 || r.Skew >= r.Lease:
		return cli.Usagef("--skew-margin %s must be at least 0 and shorter than --lease %s", r.Skew, r.Lease)
	}
	var p cli.Problems
	if !r.DryRun {
		r.Notify.Check(&p)
	}
	r.Log.Check(&p)
	return p.Err()
}

// Pending is the records to notify again at now (Pending: ids, or all up
// to the limit), on a store that can amend and list results (named
// storeName in the error when it cannot).
func (r *RenotifyFlags) Pending(ctx context.Context, store driver.Store, storeName string, ids []string, now time.Time) ([]driver.Record, error) {
	_, ok1 := store.(driver.Amender)
	_, ok2 := store.(driver.ResultLister)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("the %s store cannot amend or list results", storeName)
	}
	return Pending(ctx, store, ids, r.All, r.Limit, now)
}

// Proposal is the approvals propose command of renotifying ids (or all).
func (r *RenotifyFlags) Proposal(ids []string) string {
	if r.All {
		return `renotify --reason "…why…"`
	}
	return `renotify --reason "…why…" --charge-id ` + strings.Join(ids, ",")
}

// Renotifier is the renotifier of r on store: its sender the channel's
// (none in a dry run), its log's lines to log.
func (r *RenotifyFlags) Renotifier(ctx context.Context, store driver.Store, log *slog.Logger) (*Renotifier, error) {
	var sender charge.NoticeSender
	if !r.DryRun {
		var err error
		if sender, err = r.Notify.KeptNoticeSender(ctx, r.Timeout, log); err != nil {
			return nil, err
		}
	}
	return NewRenotifier(store, sender, RenotifierOptions{Lease: r.Lease, SkewMargin: pipeline.GuardSkew(r.Skew), Retention: r.Retention,
		Timeout: r.Timeout, Channel: r.Notify.Channel})
}
