package operate

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Bind defines reopen's flags on f (the retention's default: the
// guard's, idempotency.DefaultRetention).
func (o *ReopenOptions) Bind(f *cli.FlagSet) {
	f.Bool(&o.NewAttempt, "new-attempt", "", false, "for a charge FAILED by an explicit decline (e.g. INSUFFICIENT_FUNDS, now that funds arrived): debit it under the next bank-key generation (CHARGE_ID~2, ~3, …), since the bank's answer under the old key is final; refused for any other failure")
	f.Bool(&o.SameKey, "same-key", "", false, "reopen an explicit decline under its old bank key (refused without it: the bank declines it again); only for a \"decline\" that was not the bank's final word, such as a --corebank-declines entry that took a 401 for one")
	f.String(&o.Reason, "reason", "", "", "why the charge is reopened (kept in the record and the audit log; required), e.g. \"INC-4711: gateway token fixed\"")
	f.Duration(&o.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "how long the reopened record is kept")
}

// Settle takes the command's arguments (exactly one CHARGE_ID) and checks
// the flags: a reason, a retention of a day at least. name is the
// command's, for the usage error.
func (o *ReopenOptions) Settle(name string, args []string) error {
	if len(args) != 1 {
		return cli.Usagef("give exactly one CHARGE_ID (see chargerecovery %s -h)", name)
	}
	if strings.TrimSpace(o.Reason) == "" {
		return cli.Usagef("--reason is required: say why the charge may be debited now (it stays in the record)")
	}
	if o.Retention < 24*time.Hour {
		return cli.Usagef("--retention %s is under 24h", o.Retention)
	}
	o.ID = args[0]
	return nil
}

// Proposal is the approvals propose command of a new attempt on o's
// charge.
func (o ReopenOptions) Proposal() string {
	return fmt.Sprintf("reopen --new-attempt --charge-id %s --reason %q", o.ID, o.Reason)
}

// HardDecline says why a new attempt on charge id is one on a hard decline
// ("a new attempt on a hard decline, CODE (why)"), "" when the record is
// not FAILED by one (or cannot be read: the reopen then says why).
func HardDecline(ctx context.Context, store driver.Store, id string, now time.Time) string {
	rec, err := store.Get(ctx, id, now)
	if err != nil || rec.State != driver.StateFailed {
		return ""
	}
	code := charge.DeclineCode(rec.Detail)
	if why, hard := charge.HardDecline(code); hard {
		return fmt.Sprintf("a new attempt on a hard decline, %s (%s)", charge.Printable(code), why)
	}
	return ""
}

// RedriveFlags are redrive's flags: the run, and what Settle turns into
// it — the reason codes and charge ids (comma-separated), the records'
// retention (default idempotency.DefaultRetention) and the age past which
// entries are held back (0: the retention less a day).
type RedriveFlags struct {
	Run               RedriveRun
	Codes, IDs        string
	Retention, MaxAge time.Duration
}

// Bind defines the flags on f.
func (r *RedriveFlags) Bind(f *cli.FlagSet) {
	o := &r.Run
	f.Bool(&o.DryRun, "dry-run", "", false, "count what would move; move nothing")
	f.String(&r.Codes, "reason", "", "", "move only entries with these reason codes, comma-separated (invalid, debit_failed, duplicate_failed, conflict, max_receives, too_large)")
	f.String(&r.IDs, "charge-id", "", "", "move only the entries of these charges, comma-separated")
	f.Int(&o.Max, "max", "", 0, "move at most this many (0: all that match)")
	f.Bool(&o.Force, "force", "", false, "also move CONFLICT entries (a charge id reused with another payload; they will conflict again) and entries older than --max-age")
	f.Duration(&r.Retention, "retention", "IC_RETENTION", idempotency.DefaultRetention, "the idempotency records' retention (as serve's --retention)")
	f.Duration(&r.MaxAge, "max-age", "", 0, "hold back entries older than this (default: --retention minus 24h, so that the record that stops a second debit still exists when the message comes back)")
}

// Settle checks the flags and sets the run's choice and hold-backs at now
// (RedriveAt).
func (r *RedriveFlags) Settle(now time.Time) error {
	o := &r.Run
	var err error
	if o.Codes, err = ParseCodes(r.Codes); err != nil {
		return err
	}
	o.ChargeIDs = cli.SplitList(r.IDs)
	if o.Max < 0 || r.MaxAge < 0 {
		return cli.Usagef("--max and --max-age must not be negative")
	}
	at := RedriveAt(now, r.Retention)
	o.HoldBack, o.Now, o.Before, o.MaxAge = at.HoldBack, at.Now, at.Before, cmp.Or(r.MaxAge, r.Retention-24*time.Hour)
	if o.MaxAge <= 0 || o.MaxAge >= r.Retention {
		return cli.Usagef("--max-age %s must be positive and shorter than --retention %s", o.MaxAge, r.Retention)
	}
	return nil
}

// Proposal is the approvals propose command of this redrive.
func (r RedriveFlags) Proposal() string {
	w := []string{"redrive"}
	if r.Codes != "" {
		w = append(w, "--reason-code "+r.Codes)
	}
	if r.IDs != "" {
		w = append(w, "--charge-id "+r.IDs)
	}
	if r.Run.Force {
		w = append(w, "--force")
	}
	return strings.Join(append(w, `--reason "…why…"`), " ")
}

// CountMoves is how many entries o would move: a dry run of it that
// prints nothing.
func CountMoves(ctx context.Context, q queue.Operator, o RedriveRun) (int, error) {
	o.DryRun, o.Out, o.JSON = true, io.Discard, false
	n := 0
	o.Visit = func(_ queue.DLQEntry, d queue.RedriveDecision) {
		if d == queue.Move {
			n++
		}
	}
	err := Redrive(ctx, q, o)
	return n, err
}
