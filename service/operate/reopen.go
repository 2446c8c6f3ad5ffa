package operate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/service/status"
)

// Reopen turns the FAILED record of id back into one the next delivery
// claims afresh, by operator for reason, with the one rule the command
// line and the console share: a new attempt (the next bank-key
// generation) only for a charge charge.EligibleForNewGeneration accepts.
// Its errors are the guard's: idempotency.ErrNotFound, ErrNotFailed (the
// record returned says what it is), ErrNotEligible.
func Reopen(ctx context.Context, g *idempotency.Guard, id, reason string, newAttempt bool, operator string) (driver.Record, error) {
	return g.Reopen(ctx, id, reason, idempotency.ReopenOptions{NewGeneration: newAttempt,
		Eligible: charge.EligibleForNewGeneration, Operator: operator})
}

// ReopenOptions are a reopen asked for on the command line.
type ReopenOptions struct {
	ID, Reason, Operator string
	NewAttempt           bool
	Retention            time.Duration // of the reopened record
	JSON                 bool
	// Out gets the report; Audit the audit line (JSON).
	Out, Audit io.Writer
}

// ReopenCharge is chargerecovery reopen: Reopen on store, each refusal
// said as what to do instead, the audit line, and the record (with the
// next step: the redrive).
func ReopenCharge(ctx context.Context, store driver.Store, o ReopenOptions) error {
	guard, err := idempotency.NewGuard(store, idempotency.Options{Retention: o.Retention})
	if err != nil {
		return err
	}
	id := o.ID
	rec, err := Reopen(ctx, guard, id, o.Reason, o.NewAttempt, o.Operator)
	switch {
	case errors.Is(err, idempotency.ErrNotFound):
		return fmt.Errorf("no idempotency record for %s (never claimed, or past its retention): nothing to reopen; redriving its message debits it as a new charge", id)
	case errors.Is(err, idempotency.ErrNotFailed):
		return fmt.Errorf("%s is %s, not FAILED: only a FAILED record is reopened (a DONE charge was debited; an IN_PROGRESS one is reclaimed by its next delivery)", id, rec.State)
	case errors.Is(err, idempotency.ErrNotEligible):
		return fmt.Errorf("--new-attempt refused: %w; reopen without --new-attempt retries under the same key", err)
	case err != nil:
		return err
	}
	AuditLog(o.Audit).LogAttrs(ctx, slog.LevelWarn, "FAILED charge reopened by an operator",
		slog.Bool("audit", true), slog.String("action", reopenAction(o.NewAttempt)), slog.String("result", "reopened"), slog.String("charge_id", rec.Key), slog.String("reason", o.Reason),
		slog.String("previous_status", rec.PrevStatus), slog.String("previous_detail", rec.PrevDetail),
		slog.Int("attempt", rec.Attempt), slog.Int("reopens", rec.Reopens), slog.Int("generation", rec.Generation),
		slog.String("bank_key", charge.BankKey(rec.Key, rec.Generation)), slog.String("operator", o.Operator))
	if o.JSON {
		return json.NewEncoder(o.Out).Encode(status.RecordJSONOf(rec, time.Now()))
	}
	fmt.Fprintf(o.Out, "reopened %s (was %s: %s); its next delivery claims it afresh under bank key %s (generation %d).\n",
		rec.Key, rec.PrevStatus, rec.PrevDetail, charge.BankKey(rec.Key, rec.Generation), rec.Generation)
	fmt.Fprintf(o.Out, "next: chargerecovery redrive --charge-id %s (moves its dead-lettered message back to the queue)\n\n", rec.Key)
	status.PrintRecord(o.Out, rec, time.Now())
	return nil
}

// reopenAction is the audit trail's name of a reopen.
func reopenAction(newAttempt bool) string {
	if newAttempt {
		return "reopen --new-attempt"
	}
	return "reopen"
}
