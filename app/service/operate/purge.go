package operate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/queue"
)

// PurgeOptions are a DLQ purge an operator asked for.
type PurgeOptions struct {
	IDs      []string // DLQ entry ids (at least one)
	Force    bool     // also entries that could be redriven
	Operator string   // named in the audit lines
	JSON     bool     // the report as JSON
	// Out gets the report; Audit the audit lines (JSON).
	Out, Audit io.Writer
	// Audited, when set, runs the deletion as the person acting, its
	// audit lines going to the writer it gives (the session's trail):
	// Operator and Audit are then its (session.Session.Audited).
	Audited func(del func(operator string, audit io.Writer) error) error
}

// PurgeDLQ deletes DLQ entries by id for good: the way out for an entry
// that can never be redriven (its body is over the size limit). Any other
// entry carries a charge someone may still have to recover, so it is
// refused (a usage error) unless o.Force says the operator decided so;
// every deletion is an audit line naming the operator, the entries and
// their charges, written before the delete. An id not found (or gone
// meanwhile) is an error after the report.
func PurgeDLQ(ctx context.Context, q queue.Operator, o PurgeOptions) error {
	ids := o.IDs
	purger, ok := q.(queue.DLQPurger)
	if !ok {
		return cli.Usagef("this backend's DLQ has no entries that cannot be redriven (SQS refuses messages over the size limit itself); redrive the entries, or let the DLQ's retention expire them")
	}
	listing, err := List(ctx, q, ListOptions{Now: time.Now(), Match: func(e queue.DLQEntry) bool { return slices.Contains(ids, e.ID) }})
	if err != nil {
		return err
	}
	entries := listing.Entries
	var chosen, refused, charges []string
	for _, e := range entries {
		if e.Size == 0 && !o.Force {
			refused = append(refused, e.ID)
			continue
		}
		chosen = append(chosen, e.ID)
		charges = append(charges, orElse(e.ChargeID, "message "+e.ID))
	}
	var missing []string
	for _, id := range ids {
		if !slices.ContainsFunc(entries, func(e Entry) bool { return e.ID == id }) {
			missing = append(missing, id)
		}
	}
	if len(refused) > 0 {
		return cli.Usagef("not purged: %s can be redriven (its body is within the size limit); redrive it, or say --force after checking it with dlq show", strings.Join(refused, ", "))
	}
	var deleted []string
	del := func(operator string, w io.Writer) error {
		// The intent first: nothing is deleted that no audit line names,
		// even if the answer to the delete is lost.
		o.Operator = operator
		audit := AuditLog(w)
		audit.LogAttrs(ctx, slog.LevelWarn, "DLQ entries to be purged by an operator", slog.Bool("audit", true), slog.String("action", "dlq purge"), slog.String("result", "requested"),
			slog.String("operator", o.Operator), slog.Any("entries", chosen), slog.Any("charges", charges), slog.Bool("forced", o.Force))
		deleted, err = purger.PurgeDLQ(ctx, chosen)
		var gone []string
		for i, id := range chosen {
			if slices.Contains(deleted, id) {
				gone = append(gone, charges[i])
			}
		}
		if err != nil {
			audit.LogAttrs(ctx, slog.LevelError, "DLQ purge failed: some of the entries may be gone; dlq list shows what is left", slog.Bool("audit", true), slog.String("action", "dlq purge"), slog.String("result", "failed"),
				slog.String("operator", o.Operator), slog.Any("entries", chosen), slog.String("error", err.Error()))
			return err
		}
		audit.LogAttrs(ctx, slog.LevelWarn, "DLQ entries purged by an operator", slog.Bool("audit", true), slog.String("action", "dlq purge"), slog.String("result", "purged"),
			slog.String("operator", o.Operator), slog.Any("entries", deleted), slog.Any("charges", gone), slog.Bool("forced", o.Force))
		return nil
	}
	if len(chosen) > 0 {
		if o.Audited != nil {
			err = o.Audited(del)
		} else {
			err = del(o.Operator, o.Audit)
		}
		if err != nil {
			return err
		}
	}
	for _, id := range chosen {
		if !slices.Contains(deleted, id) {
			missing = append(missing, id) // gone meanwhile
		}
	}
	if o.JSON {
		if err := json.NewEncoder(o.Out).Encode(struct {
			Purged  []string `json:"purged"`
			Missing []string `json:"missing,omitempty"`
		}{append([]string{}, deleted...), missing}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(o.Out, "purged %d DLQ entr%s: %s\n", len(deleted), plural(len(deleted), "y", "ies"), strings.Join(deleted, ", "))
	}
	if len(missing) > 0 {
		return fmt.Errorf("no DLQ entry with id %s (redriven, purged or expired already; dlq list shows what is there)", strings.Join(missing, ", "))
	}
	return nil
}

// AuditLog is the command line's audit trail on w: one JSON line per
// action, with "audit": true.
func AuditLog(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
