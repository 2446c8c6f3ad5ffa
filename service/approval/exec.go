package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/service/operate"
)

// FormatTotals is totals as a person reads them: "INR 1,250.00 (50)".
func FormatTotals(ts []Total) string {
	var w []string
	for _, t := range ts {
		if t.Currency == "" {
			w = append(w, fmt.Sprintf("%d without an amount", t.Count))
			continue
		}
		w = append(w, fmt.Sprintf("%s (%d)", charge.Money{Minor: t.Minor, Currency: charge.Currency(t.Currency)}, t.Count))
	}
	if len(w) == 0 {
		return "no amount"
	}
	return strings.Join(w, ", ")
}

// Backend is what proposals choose from and act on.
type Backend struct {
	Queue queue.Operator
	Store driver.Store
	// Retention is the records' retention (as serve's): a redrive holds
	// back entries older than it less a day, unless Force.
	Retention time.Duration
	// Renotifier sends missed notices (nil: Renotify proposals refused).
	Renotifier *operate.Renotifier
}

// Select chooses the targets of spec at now: the DLQ entries it names
// (Redrive, Reopen: dead-lettered before now, less OlderThan), or the
// records with a missed notice (Renotify). What the listing could not see
// is an error, never a quietly short proposal; named charges that match
// nothing are an error naming them.
func (be Backend) Select(ctx context.Context, spec Spec, now time.Time) ([]Target, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	if spec.Kind == Renotify {
		return be.selectNotices(ctx, spec, now)
	}
	codes, err := operate.ParseCodes(strings.Join(spec.Codes, ","))
	if err != nil {
		return nil, err
	}
	if spec.Kind == Reopen && len(codes) == 0 {
		codes = []queue.Code{"debit_failed"} // a FAILED charge's entry
	}
	o := operate.ListOptions{Now: now, Codes: codes, Before: now.Add(-spec.OlderThan), Match: operate.ChargeMatch(spec.ChargeIDs)}
	l, err := operate.List(ctx, be.Queue, o)
	if err != nil {
		return nil, err
	}
	if note := l.Incomplete(); note != "" {
		return nil, fmt.Errorf("no proposal made: %s", note)
	}
	var out []Target
	seen := map[string]bool{}
	for _, e := range l.Entries {
		t := Target{ChargeID: e.ChargeID, DLQID: e.ID, Account: e.Account, Code: e.Code}
		t.Minor, t.Currency = e.Minor, e.Currency
		seen[e.ChargeID] = true
		out = append(out, t)
	}
	if missing := unmatched(spec.ChargeIDs, seen); len(missing) > 0 {
		return nil, fmt.Errorf("no proposal made: no DLQ entry%s for %s", codeNote(codes), strings.Join(missing, ", "))
	}
	return out, nil
}

func codeNote(codes []queue.Code) string {
	if len(codes) == 0 {
		return ""
	}
	var w []string
	for _, c := range codes {
		w = append(w, string(c))
	}
	return " with reason " + strings.Join(w, ", ")
}

func unmatched(ids []string, seen map[string]bool) []string {
	var out []string
	for _, id := range ids {
		if !seen[id] {
			out = append(out, id)
		}
	}
	return out
}

func (be Backend) selectNotices(ctx context.Context, spec Spec, now time.Time) ([]Target, error) {
	recs, err := operate.Pending(ctx, be.Store, spec.ChargeIDs, len(spec.ChargeIDs) == 0, 100_000, now)
	if err != nil {
		return nil, err
	}
	var out []Target
	var wrong []string
	for _, rec := range recs {
		if rec.State != driver.StateDone || rec.Status != string(charge.DebitedNotificationFailed) {
			if rec.State == driver.StateAbsent {
				wrong = append(wrong, rec.Key+" (no record)")
			} else {
				wrong = append(wrong, fmt.Sprintf("%s (%s)", rec.Key, strings.TrimSpace(fmt.Sprintf("%s %s", rec.State, rec.Status))))
			}
			continue
		}
		t := Target{ChargeID: rec.Key, Code: rec.Status}
		if n, ok := charge.PendingNotice(rec.Status, rec.Detail); ok {
			t.Account, t.Minor, t.Currency = n.Account, n.Amount.Minor, string(n.Amount.Currency)
		}
		out = append(out, t)
	}
	if len(wrong) > 0 {
		return nil, fmt.Errorf("no proposal made: only DEBITED_NOTIFICATION_FAILED records are notified again, not %s", strings.Join(wrong, ", "))
	}
	return out, nil
}

// Execute acts on one batch.
func (be Backend) Execute(ctx context.Context, p Proposal, batch []Target, who Actor) map[string]Outcome {
	operator := who.Name + " (" + who.Via + ", " + p.ID + ")"
	switch p.Spec.Kind {
	case Redrive:
		return be.redrive(ctx, p, batch, p.Spec.Force)
	case Reopen:
		return be.reopen(ctx, p, batch, operator)
	case Renotify:
		return be.renotify(ctx, p, batch, operator)
	}
	return nil
}

// redrive moves the batch's DLQ entries (by id, dead-lettered before the
// proposal was made) with the command line's hold-backs unless force.
func (be Backend) redrive(ctx context.Context, p Proposal, batch []Target, force bool) map[string]Outcome {
	want := map[string]Target{}
	for _, t := range batch {
		want[t.DLQID] = t
	}
	out := map[string]Outcome{}
	o := operate.RedriveAt(time.Now(), be.Retention)
	o.Before = p.At.Add(time.Second) // what the proposal saw; nothing dead-lettered since
	o.Force = force
	o.Match = func(e queue.DLQEntry) bool { _, ok := want[e.ID]; return ok }
	o.Visit = func(e queue.DLQEntry, d queue.RedriveDecision) {
		t, ok := want[e.ID]
		if !ok {
			return
		}
		if d == queue.HoldBack {
			out[t.Key()] = Outcome{Result: "held back", Why: "a conflict or over the size limit: needs --force (or a purge)"}
		}
	}
	o.Moved = func(e queue.DLQEntry) {
		if t, ok := want[e.ID]; ok {
			out[t.Key()] = Outcome{Result: "moved"}
		}
	}
	rep, err := be.Queue.Redrive(ctx, o)
	for _, t := range batch {
		if _, ok := out[t.Key()]; ok {
			continue
		}
		switch {
		case err != nil:
			out[t.Key()] = Outcome{Result: "failed", Why: "the backend did not answer: " + charge.Clip(err.Error(), 200)}
		case rep.TooOld > 0:
			out[t.Key()] = Outcome{Result: "held back", Why: "older than the retention less a day, or gone: check it, then a proposal with --force"}
		default:
			out[t.Key()] = Outcome{Result: "failed", Why: "not on the DLQ any more (redriven, purged or expired meanwhile), or not seen by this pass"}
		}
	}
	return out
}

// reopen reopens each charge's FAILED record, then redrives its entry.
func (be Backend) reopen(ctx context.Context, p Proposal, batch []Target, operator string) map[string]Outcome {
	guard, err := idempotency.NewGuard(be.Store, idempotency.Options{Retention: be.Retention})
	out := map[string]Outcome{}
	if err != nil {
		for _, t := range batch {
			out[t.Key()] = Outcome{Result: "failed", Why: err.Error()}
		}
		return out
	}
	var toMove []Target
	for _, t := range batch {
		if ctx.Err() != nil {
			break
		}
		rec, err := operate.Reopen(ctx, guard, t.ChargeID, p.Spec.Reason, p.Spec.NewAttempt, operator)
		switch {
		case errors.Is(err, idempotency.ErrNotFailed) && rec.State == driver.StateInProgress && !rec.LeaseUntil.After(time.Now()):
			toMove = append(toMove, t) // reopened by an earlier run that stopped before its redrive
		case err != nil:
			out[t.Key()] = Outcome{Result: "failed", Why: charge.Clip(err.Error(), 300)}
		default:
			toMove = append(toMove, t)
		}
	}
	for k, o := range be.redrive(ctx, p, toMove, false) {
		if o.Result == "moved" {
			o.Result = "reopened"
		} else {
			o.Why = "reopened, but not redriven: " + o.Why
		}
		out[k] = o
	}
	return out
}

// renotify sends each missed notice again (claimed once, as the command
// line's renotify).
func (be Backend) renotify(ctx context.Context, p Proposal, batch []Target, operator string) map[string]Outcome {
	out := map[string]Outcome{}
	for _, t := range batch {
		if ctx.Err() != nil {
			break
		}
		if be.Renotifier == nil {
			out[t.Key()] = Outcome{Result: "failed", Why: "no notification channel here (--notify)"}
			continue
		}
		rec, err := be.Store.Get(ctx, t.ChargeID, time.Now())
		if err != nil {
			out[t.Key()] = Outcome{Result: "failed", Why: charge.Clip(err.Error(), 300)}
			continue
		}
		r := be.Renotifier.One(ctx, rec, operator, p.Spec.Reason, false, time.Now())
		res := r.Result
		if res != "sent" && res != "failed" {
			res = "skipped"
		}
		out[t.Key()] = Outcome{Result: res, Why: charge.Clip(charge.MaskText(r.Why), 300)}
	}
	return out
}
