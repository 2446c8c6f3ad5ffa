package operate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Renotified is what Renotifier.One did with one record.
type Renotified struct {
	ChargeID  string `json:"chargeId"`
	Reference string `json:"reference,omitempty"`
	Result    string `json:"result"` // would_send, sent, failed, skipped
	Why       string `json:"why,omitempty"`
}

// Renotifier sends the pre-debit notice that failed after a successful
// debit (a DEBITED_NOTIFICATION_FAILED record) again, with the same
// notification key, and on success records DEBITED with a history line:
// one conditional write on the record as read. It never calls the bank.
//
// At most one sender: before it sends, it claims the notice in the
// idempotency store (the key NoticeClaimKey, with the store's own lease
// and fencing), so that two runs at once (two operators, a run and the
// console) send each notice once; the other run skips it. A run that stops
// after claiming (a crash) leaves the claim to lapse: a later run
// reclaims it after the lease and sends. The claim is finished DONE once
// the notice is sent, so that a run that stopped between sending and
// recording leaves a later run only the record to write, not the notice to
// send again.
type Renotifier struct {
	Sender  charge.NoticeSender // nil for a dry run
	Amender driver.Amender
	// Claims claims each notice before it is sent, in the same store
	// (its Lease must outlast Timeout). Required to send.
	Claims  *idempotency.Guard
	Channel string        // named in the history line
	Timeout time.Duration // one notification; default 5s
}

// NoticeClaimKey is the idempotency key under which a renotify claims
// notice before sending it.
func NoticeClaimKey(notice charge.Notice) string {
	return driver.InternalKeyPrefix + "renotify/" + notice.NotificationKey
}

// SentStatus is the status of a notice's claim once the notice was sent.
const SentStatus = "SENT"

// One renotifies rec, by operator for reason; dryRun only says whether it
// would send.
func (r Renotifier) One(ctx context.Context, rec driver.Record, operator, reason string, dryRun bool, now time.Time) Renotified {
	notice, ok := charge.PendingNotice(rec.Status, rec.Detail)
	switch {
	case rec.State == "":
		return Renotified{ChargeID: rec.Key, Result: "not_found", Why: "no idempotency record (never claimed, or past its retention): nothing to notify"}
	case rec.State == driver.StateWaiting && rec.Status == string(charge.NoticeSent):
		return Renotified{ChargeID: rec.Key, Result: "skipped", Why: fmt.Sprintf("WAITING NOTICE_SENT: the advance notice went out (%s); nothing is debited before %s and no notice follows the debit: nothing to send",
			charge.Printable(rec.Detail), rec.LeaseUntil.UTC().Format(time.RFC3339))}
	case rec.State == driver.StateWaiting:
		return Renotified{ChargeID: rec.Key, Result: "skipped", Why: fmt.Sprintf("WAITING %s: not debited yet (%s): nothing to send",
			charge.Printable(rec.Status), charge.Printable(rec.Detail))}
	case rec.State != driver.StateDone || rec.Status != string(charge.DebitedNotificationFailed):
		return Renotified{ChargeID: rec.Key, Result: "skipped", Why: fmt.Sprintf("%s %s: only DEBITED_NOTIFICATION_FAILED is notified again", rec.State, rec.Status)}
	case !ok:
		return Renotified{ChargeID: rec.Key, Result: "skipped", Why: "the record keeps no notice (written by an older version): notify the customer by hand"}
	case dryRun:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "would_send"}
	case r.Claims == nil:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: "no store to claim the notice in: not sent"}
	}
	key := NoticeClaimKey(notice)
	// The charge record's token is the claim's fingerprint: a notice of
	// another record under the same charge id is not this one.
	claim, err := r.Claims.Claim(ctx, key, rec.Token)
	if err != nil {
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: "could not claim the notice; not sent: " + charge.Clip(err.Error(), 300)}
	}
	switch claim.Outcome {
	case idempotency.Acquired, idempotency.Reclaimed:
	case idempotency.DuplicateDone:
		// Sent by a run that stopped before it recorded the send, or that
		// is recording it now: only the record is left to write.
		return r.record(ctx, rec, notice, false, fmt.Sprintf("renotified %s by %s: the %s notice was sent earlier by another renotify (%s), which did not record it; was DEBITED_NOTIFICATION_FAILED; debited %s; why: %s",
			now.UTC().Format(time.RFC3339), operator, notice.NotificationKey, claim.Record.UpdatedAt.UTC().Format(time.RFC3339), notice.DebitedAt.UTC().Format(time.RFC3339), reason))
	case idempotency.DuplicateInProgress:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "skipped",
			Why: fmt.Sprintf("another renotify is sending it (claimed until %s); if it stopped, run again after that", claim.Record.LeaseUntil.UTC().Format(time.RFC3339))}
	default:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "skipped",
			Why: fmt.Sprintf("the notice's claim %s is %s (%s): notify the customer by hand", key, claim.Record.State, claim.Outcome)}
	}
	lease := claim.Lease()
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	err = r.Sender.SendNotice(sctx, notice)
	cancel()
	if err != nil {
		// Not sent (or not known to be): give the claim up, so that the
		// next run may try at once; the receiver drops a repeat by its key.
		_ = r.Claims.Yield(context.WithoutCancel(ctx), lease)
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: charge.Clip(err.Error(), 300)}
	}
	// Failing to mark the claim only lets a later run send once more, after
	// the lease: the record below is what matters.
	_ = r.Claims.Complete(context.WithoutCancel(ctx), lease, SentStatus, notice.Reference)
	return r.record(ctx, rec, notice, true, fmt.Sprintf("renotified %s by %s on %s: %s notice sent; was DEBITED_NOTIFICATION_FAILED; debited %s; why: %s",
		now.UTC().Format(time.RFC3339), operator, r.Channel, notice.NotificationKey, notice.DebitedAt.UTC().Format(time.RFC3339), reason))
}

// record writes DEBITED with line on rec, as read; sent says whether this
// run sent the notice. A record another run wrote DEBITED meanwhile is
// the same outcome.
func (r Renotifier) record(ctx context.Context, rec driver.Record, notice charge.Notice, sent bool, line string) Renotified {
	result := "skipped" // this run sent nothing
	if sent {
		result = "sent"
	}
	_, err := r.Amender.Amend(ctx, driver.AmendRequest{Key: rec.Key, Token: rec.Token, FromStatus: rec.Status, Status: string(charge.Debited),
		Detail: notice.Reference, History: append(append([]string(nil), rec.History...), line), Now: time.Now()})
	switch {
	case err == nil && sent:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "sent"}
	case err == nil:
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: result, Why: "sent earlier by another renotify; recorded DEBITED now"}
	case errors.Is(err, idempotency.ErrStale):
		if cur, gerr := r.Claims.Get(ctx, rec.Key); gerr == nil && cur.State == driver.StateDone && cur.Status == string(charge.Debited) {
			why := "recorded DEBITED by another renotify"
			if !sent {
				why = "sent and recorded by another renotify"
			}
			return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: result, Why: why}
		}
		return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: "the notice was sent, but the record changed meanwhile; the receiver drops a repeat by its key"}
	}
	return Renotified{ChargeID: rec.Key, Reference: notice.Reference, Result: "failed", Why: "the notice was sent, but the record could not be updated: " + err.Error()}
}

// RenotifierOptions configure NewRenotifier.
type RenotifierOptions struct {
	// Lease is how long a run holds a notice's claim (default 1m: it must
	// outlast Timeout); SkewMargin as idempotency.Options' (0: the
	// default; negative: none); Retention how long the claim is kept.
	Lease, SkewMargin, Retention time.Duration
	Timeout                      time.Duration // one notification; default 5s
	Channel                      string        // named in the history line
}

// ErrCannotAmend: the store cannot amend a record, so a notice sent again
// could not be recorded.
var ErrCannotAmend = errors.New("the store cannot amend records")

// NewRenotifier is the Renotifier of the command line and the console:
// sending with sender (nil for a dry run), claiming each notice in store
// and amending its record there.
func NewRenotifier(store driver.Store, sender charge.NoticeSender, o RenotifierOptions) (*Renotifier, error) {
	am, ok := store.(driver.Amender)
	if !ok {
		return nil, ErrCannotAmend
	}
	claims, err := idempotency.NewGuard(store, idempotency.Options{Lease: cmp.Or(o.Lease, time.Minute), SkewMargin: o.SkewMargin, Retention: o.Retention})
	if err != nil {
		return nil, err
	}
	return &Renotifier{Sender: sender, Amender: am, Claims: claims, Channel: o.Channel, Timeout: o.Timeout}, nil
}

// Pending are the records a renotify run looks at: those of ids, or with
// all (ids empty) every DEBITED_NOTIFICATION_FAILED record, oldest first,
// at most limit.
func Pending(ctx context.Context, store driver.Store, ids []string, all bool, limit int, now time.Time) ([]driver.Record, error) {
	if all {
		lister, ok := store.(driver.ResultLister)
		if !ok {
			return nil, errors.New("the store cannot list results")
		}
		return lister.ListByResult(ctx, driver.StateDone, string(charge.DebitedNotificationFailed), now, limit)
	}
	var recs []driver.Record
	for _, id := range ids {
		rec, err := store.Get(ctx, id, now)
		if errors.Is(err, idempotency.ErrNotFound) {
			// Reported (not_found) and an error after the others are done.
			recs = append(recs, driver.Record{Key: id})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// RenotifyRun is a renotify asked for on the command line.
type RenotifyRun struct {
	Operator, Reason string
	DryRun, JSON     bool
	Now              time.Time
	// Out gets the report; Audit an audit line per notice sent (JSON).
	Out, Audit io.Writer
}

// Renotify is chargerecovery renotify over recs: each sent again (or, in a
// dry run, said whether it would be), an audit line per notice sent, a
// line per record and the counts; any failed is an error after the report.
func (r Renotifier) Renotify(ctx context.Context, recs []driver.Record, o RenotifyRun) error {
	audit := AuditLog(o.Audit)
	var report []Renotified
	failed := 0
	var missing []string
	for _, rec := range recs {
		res := r.One(ctx, rec, o.Operator, o.Reason, o.DryRun, o.Now)
		report = append(report, res)
		switch res.Result {
		case "not_found":
			missing = append(missing, rec.Key)
		case "failed":
			failed++
		case "sent":
			audit.LogAttrs(ctx, slog.LevelWarn, "missed pre-debit notification sent by an operator", slog.Bool("audit", true), slog.String("action", "renotify"), slog.String("result", "sent"),
				slog.String("charge_id", charge.ShowID(rec.Key)), slog.String("reference", res.Reference), slog.String("channel", r.Channel),
				slog.String("previous_status", rec.Status), slog.String("operator", o.Operator), slog.String("reason", o.Reason))
		}
	}
	if o.JSON {
		if err := json.NewEncoder(o.Out).Encode(map[string]any{"records": report}); err != nil {
			return err
		}
	} else {
		counts := map[string]int{}
		for _, res := range report {
			counts[res.Result]++
			fmt.Fprintf(o.Out, "%-9s %s %s %s\n", res.Result, res.ChargeID, res.Reference, res.Why)
		}
		notFound := ""
		if len(missing) > 0 {
			notFound = fmt.Sprintf(", %d not found", len(missing))
		}
		fmt.Fprintf(o.Out, "%d record(s): %d sent, %d would send, %d failed, %d skipped%s\n", len(report),
			counts["sent"], counts["would_send"], counts["failed"], counts["skipped"], notFound)
	}
	var errs []error
	if failed > 0 {
		errs = append(errs, fmt.Errorf("%d notification(s) not sent or not recorded; run renotify again once the channel works", failed))
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("no idempotency record for %s: nothing notified for %s (check the id with inspect)", strings.Join(missing, ", "), plural(len(missing), "it", "them")))
	}
	return errors.Join(errs...)
}
