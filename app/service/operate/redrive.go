package operate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/queue"
)

// RedriveAt are the options every operator's redrive starts from, at now,
// for records kept retention: the handler's hold-backs (conflicts, bodies
// over the size limit), entries older than retention less a day held back
// (the record that stops a second debit must still exist when the message
// comes back), and only what was dead-lettered before now (a charge the
// consumers dead-letter again meanwhile is not moved, or counted, again).
func RedriveAt(now time.Time, retention time.Duration) queue.RedriveOptions {
	// A retention of a day or less leaves no age safe to redrive: every
	// entry is held back (a MaxAge of 0 or less would be no limit).
	return queue.RedriveOptions{HoldBack: chargehandler.HoldBack, MaxAge: max(retention-24*time.Hour, time.Nanosecond), Now: now, Before: now}
}

// RedriveRun is a redrive asked for on the command line.
type RedriveRun struct {
	queue.RedriveOptions
	// ChargeIDs, when given, choose the entries of these charges (Match,
	// when nil, is ChargeMatch of them); each that matches no entry is an
	// error after the run, which moves the others.
	ChargeIDs []string
	Operator  string
	JSON      bool
	// Out gets the report; Audit the audit line (JSON).
	Out, Audit io.Writer
}

// Redrive is chargerecovery redrive: it moves what o chooses, writes an
// audit line naming every charge moved (even when the run then failed),
// and reports what it saw, moved and held back. What the run could not
// see was neither counted nor moved: it says so in the error, never a
// quiet "seen 0, moved 0"; chosen entries gone meanwhile are an error too.
func Redrive(ctx context.Context, q queue.Operator, o RedriveRun) error {
	var moved []string
	o.Moved = func(e queue.DLQEntry) {
		moved = append(moved, cmp.Or(ChargeIDOf(e.Body), "message "+e.ID))
	}
	if o.Match == nil {
		o.Match = ChargeMatch(o.ChargeIDs)
	}
	matched := map[string]bool{}
	if visit := o.Visit; len(o.ChargeIDs) > 0 {
		o.Visit = func(e queue.DLQEntry, d queue.RedriveDecision) {
			if d != queue.Skip {
				matched[ChargeIDOf(e.Body)] = true
			}
			if visit != nil {
				visit(e, d)
			}
		}
	}
	rep, err := q.Redrive(ctx, o.RedriveOptions)
	if !o.DryRun && len(moved) > 0 {
		AuditLog(o.Audit).LogAttrs(ctx, slog.LevelWarn, "dead-lettered charges redriven by an operator", slog.Bool("audit", true), slog.String("action", "redrive"), slog.String("result", "moved"),
			slog.String("operator", o.Operator), slog.Int("moved", rep.Moved), slog.Any("charges", moved), slog.Any("codes", o.Codes))
	}
	if err != nil {
		return err
	}
	unseen := UnseenNote(rep.Unseen, rep.Approximate)
	if o.JSON {
		if err := json.NewEncoder(o.Out).Encode(rep); err != nil {
			return err
		}
		if unseen != "" {
			return fmt.Errorf("%s (not moved)", unseen)
		}
		return errors.Join(goneMeanwhile(rep), unmatched(o, rep, matched))
	}
	verb := "moved"
	if o.DryRun {
		verb = "would move"
	}
	fmt.Fprintf(o.Out, "DLQ entries seen: %d; %s back to the queue: %d; held back (conflicts, need --force): %d; not matching: %d\n",
		rep.Seen, verb, rep.Moved, rep.HeldBack, rep.Skipped)
	if rep.TooOld > 0 {
		fmt.Fprintf(o.Out, "held back as too old: %d (older than %s: their idempotency records may be past retention, so a redrive could debit them again; check each with inspect, then --force)\n",
			rep.TooOld, o.MaxAge)
	}
	if len(rep.ByCode) > 0 {
		var parts []string
		for k, v := range rep.ByCode {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(parts)
		fmt.Fprintf(o.Out, "%s by reason code: %s\n", verb, strings.Join(parts, " "))
	}
	if unseen != "" {
		return fmt.Errorf("%s (not moved)", unseen)
	}
	return errors.Join(goneMeanwhile(rep), unmatched(o, rep, matched))
}

// unmatched is the error naming the charge ids asked for that matched no
// DLQ entry (not a quiet "moved 0"); none when --max stopped the run
// before every entry was looked at.
func unmatched(o RedriveRun, rep queue.RedriveReport, matched map[string]bool) error {
	if o.Max > 0 && rep.Moved >= o.Max {
		return nil
	}
	var none []string
	for _, id := range o.ChargeIDs {
		if !matched[id] {
			none = append(none, id)
		}
	}
	if len(none) == 0 {
		return nil
	}
	filter := ""
	if len(o.Codes) > 0 {
		filter = " with the reason codes asked for"
	}
	return fmt.Errorf("no DLQ entry%s for charge id(s) %s: nothing moved for %s (chargerecovery dlq list shows what is there; a charge that is not on the DLQ is not failed, or was redriven already)",
		filter, strings.Join(none, ", "), plural(len(none), "it", "them"))
}

// goneMeanwhile is the error of a redrive some of whose chosen entries had
// left the DLQ when their turn came (another redrive, a purge, expiry;
// on SQS also a hold that may have lapsed): nothing was moved for them.
func goneMeanwhile(rep queue.RedriveReport) error {
	if rep.Gone == 0 {
		return nil
	}
	return fmt.Errorf("%d chosen DLQ entr%s not moved: gone from the DLQ meanwhile (another redrive or a purge), or, on SQS, held too long by this run to move safely; run dlq list, and the redrive again if they are still there",
		rep.Gone, plural(rep.Gone, "y was", "ies were"))
}
