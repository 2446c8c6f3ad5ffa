// Package proposals is what chargerecovery approvals does with the book
// of service/approval under a session: a proposal made of what it selects
// now, the proposals still to act on, one approved or rejected by the
// person the session names, and a run over the backend its kind needs
// (the claim and keys of a reconciliation, the channel of a renotify).
package proposals

import (
	"context"
	"fmt"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"io"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/app/service/recon"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/safetext"
)

// Propose selects what spec touches, now, in the backend open opens (its
// queue and store, with be's other settings; a negative be.SkewMargin
// counts as 0), and keeps it in book as who's proposal. A statement that
// cannot be read is a usage error.
func Propose(ctx context.Context, book *approval.Book, who approval.Actor, spec approval.Spec, be approval.Backend, open func() (*backend.Backend, error)) (approval.Proposal, error) {
	b, err := open()
	if err != nil {
		return approval.Proposal{}, err
	}
	defer b.Close()
	be.Queue, be.Store, be.SkewMargin = b.Queue, b.Store, max(be.SkewMargin, 0)
	targets, err := be.Select(ctx, spec, time.Now())
	if err != nil {
		return approval.Proposal{}, recon.InputErr(err)
	}
	return book.Propose(who, spec, targets)
}

// Listed is book's proposals waiting, approved or running (all: every
// one, also those done, rejected or expired).
func Listed(book *approval.Book, all bool) ([]approval.Proposal, error) {
	ps, err := book.List()
	if err != nil {
		return nil, err
	}
	var out []approval.Proposal
	for _, p := range ps {
		if all || p.State == approval.Pending || p.State == approval.Approved || p.State == approval.Running {
			out = append(out, p)
		}
	}
	return out, nil
}

// RunOptions are what a run needs beyond the book: the backend it acts
// on and the settings of the kinds that need more.
type RunOptions struct {
	// Open opens the backend (called only when the proposal runs).
	Open func() (*backend.Backend, error)
	// Retention is the records' retention (as serve's).
	Retention time.Duration
	// Lease and SkewMargin are serve's, for a reconciliation's adoption
	// (Lease and Retention positive, SkewMargin not negative); Keys reads
	// serve's fingerprint keys.
	Lease, SkewMargin time.Duration
	Keys              func() (*idempotency.Fingerprinter, error)
	// Sender is the notification channel of a renotify (checked when it
	// is called), Channel its name, NotifyTimeout how long one notice may
	// take.
	Sender        func() (charge.NoticeSender, error)
	Channel       string
	NotifyTimeout time.Duration
	// Progress is told of every batch saved (nil: nothing).
	Progress func(approval.Proposal)
}

// Decision is approvals approve, reject or run of one proposal.
type Decision struct {
	// Sub is "approve", "reject" or "run"; ID the proposal's.
	Sub, ID string
	// Reason is why it is rejected (reject).
	Reason string
	// NoRun approves only.
	NoRun bool
	// Who is the person deciding; needs is what the proposal needs of her
	// (a second operator, by her key).
	Who func(needs string) (approval.Actor, error)
	// Out is told what was decided, before a run.
	Out io.Writer
}

// Decide approves, rejects or runs d's proposal in book, the run over the
// backend o opens; ran says whether it ran (p as it ended).
func Decide(ctx context.Context, book *approval.Book, d Decision, o RunOptions) (p approval.Proposal, ran bool, err error) {
	// A proposal that needs a second operator names the one deciding by
	// her key, whatever this process's flags say.
	cur, err := book.Get(d.ID)
	if err != nil {
		return p, false, err
	}
	if d.Sub == "run" || (d.Sub == "approve" && !d.NoRun) {
		// As serve's and a direct redrive's or reopen's: a retention of a
		// day or less holds back no entry however old (its age limit, the
		// retention less a day, is then none) and keeps what a run writes
		// too briefly to stop a second debit. The run's flags are said
		// before anything is decided.
		if err := CheckRetention(o.Retention); err != nil {
			return p, false, err
		}
		if err := o.check(cur.Spec.Kind); err != nil {
			return p, false, err
		}
	}
	who, err := d.Who(cur.Needs)
	if err != nil {
		return p, false, err
	}
	switch d.Sub {
	case "reject":
		if p, err = book.Reject(d.ID, who, d.Reason); err != nil {
			return p, false, err
		}
		fmt.Fprintf(d.Out, "rejected %s: nothing of it will run\n", p.ID)
		return p, false, nil
	case "approve":
		if p, err = book.Approve(d.ID, who); err != nil {
			return p, false, err
		}
		fmt.Fprintf(d.Out, "approved %s (%s, %d charge(s), %s)\n", p.ID, safetext.Text(p.Spec.Describe()), len(p.Targets), approval.FormatTotals(p.Totals))
		if d.NoRun {
			fmt.Fprintf(d.Out, "next: chargerecovery approvals run %s\n", p.ID)
			return p, false, nil
		}
	}
	b, err := o.Open()
	if err != nil {
		return p, false, err
	}
	defer b.Close()
	be, err := o.backend(b, cur.Spec.Kind)
	if err != nil {
		return p, false, err
	}
	p, err = book.Run(ctx, d.ID, who, be, func(p approval.Proposal) {
		if o.Progress != nil {
			o.Progress(p)
		}
	})
	return p, err == nil, err
}

// CheckRetention refuses a run's --retention of a day or less: the
// records' retention, of which a redrive's age limit is a day less (0 or
// less: no limit at all).
func CheckRetention(r time.Duration) error {
	if r <= 24*time.Hour {
		return cli.Usagef("--retention %s is not over 24h: a redrive would hold back no entry however old, and a record written would not be kept long enough to stop a second debit; give serve's --retention", r)
	}
	return nil
}

// check refuses the run flags of kind that are wrong.
func (o RunOptions) check(kind approval.Kind) error {
	if kind == approval.Reconcile && (o.Lease <= 0 || o.Retention <= 0 || o.SkewMargin < 0) {
		return cli.Usagef("--lease and --retention must be positive, --skew-margin not negative")
	}
	return nil
}

// backend is what a run of kind acts on in b.
func (o RunOptions) backend(b *backend.Backend, kind approval.Kind) (approval.Backend, error) {
	be := approval.Backend{Queue: b.Queue, Store: b.Store, Retention: o.Retention}
	var err error
	if err := o.check(kind); err != nil {
		return be, err
	}
	switch kind {
	case approval.Reconcile:
		if be.Fingerprints, err = o.Keys(); err != nil {
			return be, cli.Usagef("%v", err)
		}
		if be.Guard, err = recon.Guard(b.Store, o.Lease, o.Retention, o.SkewMargin); err != nil {
			return be, err
		}
		be.SkewMargin = o.SkewMargin
	case approval.Renotify:
		s, err := o.Sender()
		if err != nil {
			return be, err
		}
		if be.Renotifier, err = operate.NewRenotifier(b.Store, s, operate.RenotifierOptions{Lease: time.Minute, Retention: o.Retention, Timeout: o.NotifyTimeout, Channel: o.Channel}); err != nil {
			return be, err
		}
	}
	return be, nil
}

// PrintRun shows a run's end: each target's outcome.
func PrintRun(w io.Writer, p approval.Proposal) {
	fmt.Fprintf(w, "%s done: %d charge(s): %s\n", p.ID, len(p.Targets), approval.FormatCounts(p.Counts()))
	approval.PrintOutcomes(w, p)
}

// Failed is an error when a target of p failed.
func Failed(p approval.Proposal) error {
	if n := p.Counts()["failed"]; n > 0 {
		return fmt.Errorf("%d target(s) failed (listed above); look at each, then propose them again", n)
	}
	return nil
}

// PrintProgress shows a batch saved.
func PrintProgress(w io.Writer, p approval.Proposal) {
	done, all := p.Progress()
	fmt.Fprintf(w, "%s batch %d: %d of %d done (%s)\n", p.ID, p.Batches, done, all, approval.FormatCounts(p.Counts()))
}

// PrintListed shows the proposals listed (Listed), or says there are none.
func PrintListed(w io.Writer, ps []approval.Proposal) {
	if len(ps) == 0 {
		fmt.Fprintln(w, "no proposal waiting, approved or running (--all shows every one)")
	}
	approval.PrintList(w, ps)
}

// PrintSettings shows the four-eyes settings kept (ok: any).
func PrintSettings(w io.Writer, cur approval.Settings, ok bool) {
	if !ok {
		fmt.Fprintln(w, "four-eyes policy: off (this backend keeps no four-eyes settings: the console's start keeps them, with --console-key-file)")
		return
	}
	fmt.Fprintf(w, "four-eyes policy: %s\nsettings version %d, kept %s by %s (%s)\n%s\n", cur.Policy, cur.Version, cur.At.Format(time.RFC3339), cur.By, cur.Why, cur.Describe())
}

// Usage is `chargerecovery approvals -h`.
const Usage = `usage: chargerecovery approvals propose redrive|reopen|renotify [flags] --reason TEXT
       chargerecovery approvals propose reconcile --charge-id ID --statement FILE[,FILE] [--collection-account ID] [--kind K] [--unverified] [--notice-sent] [--refunded] --reason TEXT
       chargerecovery approvals list [--all] | show ID | approve ID | reject ID --reason TEXT | run ID
       chargerecovery approvals policy [POLICY --reason TEXT --console-key-file FILE --audit-file FILE --console-auth token|proxy [--console-token-file FILE]]

  propose  freeze what a bulk action (or one that needs four-eyes) will touch: count, sample, totals
  list     proposals waiting, approved or running (--all: every one)
  show     one proposal: its targets, and what became of each
  approve  approve another operator's proposal, and run it (--no-run: approve only)
  reject   reject a proposal (the proposer may withdraw her own)
  run      run an approved proposal, or resume one that stopped
  policy   the four-eyes settings kept in the backend; policy POLICY --reason TEXT --console-key-file … changes them (the console's key only; audited)

chargerecovery approvals SUB -h gives the flags.`

// RunFlags are the flags of approvals approve and run: what running a
// proposal needs of serve's settings (retention, lease, skew margin, the
// fingerprint keys) and, for a renotify, the notification channel.
type RunFlags struct {
	Options RunOptions
	// Notify and NotifyTimeout are renotify's channel, as serve's.
	Notify        pipeline.NotifyConfig
	NotifyTimeout time.Duration
	keys          pipeline.Config
}

// Bind defines the flags on f.
func (r *RunFlags) Bind(f *cli.FlagSet) {
	f.Duration(&r.Options.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	f.Duration(&r.NotifyTimeout, "notify-timeout", "IC_NOTIFY_TIMEOUT", 5*time.Second, "renotify: how long one notification may take")
	r.Notify.Bind(f)
	r.keys.BindKeys(f, false)
	f.Duration(&r.Options.Lease, "lease", "IC_LEASE", idempotency.DefaultLease, "reconcile: the claim an adoption takes on the record while it writes DONE (as serve's)")
	f.Duration(&r.Options.SkewMargin, "skew-margin", "IC_SKEW_MARGIN", idempotency.DefaultSkewMargin, "reconcile: a lapsed claim is taken over only this long after it ends (as serve's)")
}

// Settle fills the options from the flags parsed: open opens the backend,
// log is the notifier's logger, progress is told of every batch saved.
func (r *RunFlags) Settle(ctx context.Context, open func() (*backend.Backend, error), log *slog.Logger, progress func(approval.Proposal)) RunOptions {
	o := r.Options
	o.Keys, o.Open, o.Progress = r.keys.Keys, open, progress
	o.NotifyTimeout, o.Channel = r.NotifyTimeout, r.Notify.Channel
	o.Sender = func() (charge.NoticeSender, error) {
		if r.Notify.Channel == "" {
			return nil, cli.Usagef("a renotify proposal needs the notification channel (--notify and its flags, as renotify's)")
		}
		var p cli.Problems
		if r.Notify.Check(&p); p.Err() != nil {
			return nil, p.Err()
		}
		return r.Notify.KeptNoticeSender(ctx, r.NotifyTimeout, log)
	}
	return o
}
