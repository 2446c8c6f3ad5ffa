package operate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/foureyes"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// ErrDeclinedSameKey: a reopen under the same bank key of a charge the
// bank declined explicitly. The bank's answer under that key is final, so
// the redrive would be declined again: only a new attempt (the next key
// generation) can change the outcome.
var ErrDeclinedSameKey = errors.New("declined by the bank: reopening it under the same bank key is declined again")

// ErrNeedsApproval: a reopen with a new attempt that the four-eyes
// settings kept in the backend want proposed (or that cannot be checked
// against them): nothing was written.
var ErrNeedsApproval = errors.New("needs another operator's approval")

// Reopen turns the FAILED record of id back into one the next delivery
// claims afresh, by operator for reason, with the rules the command line
// and the console share: a new attempt (the next bank-key generation) only
// for a charge charge.EligibleForNewGeneration accepts, and a charge the
// bank declined explicitly only with a new attempt (ErrDeclinedSameKey,
// with the record). Its other errors are the guard's:
// idempotency.ErrNotFound, ErrNotFailed (the record returned says what it
// is), ErrNotEligible.
func Reopen(ctx context.Context, g *idempotency.Guard, id, reason string, newAttempt bool, operator string) (driver.Record, error) {
	return reopen(ctx, g, id, reason, newAttempt, false, false, operator, "", "")
}

// ReopenFenced is Reopen of the very record the caller read earlier and
// decided on (an approved proposal's): only the FAILED record under
// prevToken (required) is reopened — any other is idempotency.ErrNotFailed,
// with the record, nothing written — and the reopened record is written
// under token ("": a random one; see idempotency.ReopenOptions.Token).
func ReopenFenced(ctx context.Context, g *idempotency.Guard, id, reason string, newAttempt bool, operator, prevToken, token string) (driver.Record, error) {
	if prevToken == "" {
		return driver.Record{}, fmt.Errorf("%w: a fenced reopen needs the token read", idempotency.ErrInvalid)
	}
	return reopen(ctx, g, id, reason, newAttempt, false, false, operator, prevToken, token)
}

// ReopenFencedHardDecline is ReopenFenced with a new attempt that may
// present a hard decline again (charge.ErrHardDecline not refused): only
// for a proposal's target another operator approved with its decline code
// shown, under a policy with represent-hard-decline. Every other rule of
// charge.EligibleForNewGeneration holds.
func ReopenFencedHardDecline(ctx context.Context, g *idempotency.Guard, id, reason, operator, prevToken, token string) (driver.Record, error) {
	if prevToken == "" {
		return driver.Record{}, fmt.Errorf("%w: a fenced reopen needs the token read", idempotency.ErrInvalid)
	}
	return reopen(ctx, g, id, reason, true, false, true, operator, prevToken, token)
}

// ReopenAsRead is Reopen of the very record an operator was shown and
// confirmed (the console's confirmation page): only the FAILED record under
// prevToken (required) is reopened — any other is
// idempotency.ErrNotFailed, with the record, nothing written. Unlike
// ReopenFenced it carries no approval: a new attempt is asked of the
// four-eyes settings kept in the backend, as Reopen's is.
func ReopenAsRead(ctx context.Context, g *idempotency.Guard, id, reason string, newAttempt bool, operator, prevToken string) (driver.Record, error) {
	if prevToken == "" {
		return driver.Record{}, fmt.Errorf("%w: a reopen as read needs the token read", idempotency.ErrInvalid)
	}
	if newAttempt {
		if err := keptPolicyAllowsNewAttempt(ctx, g); err != nil {
			return driver.Record{}, err
		}
	}
	return reopen(ctx, g, id, reason, newAttempt, false, false, operator, prevToken, "")
}

// keptPolicyAllowsNewAttempt is nil unless the four-eyes settings kept in
// the backend want a reopen with a new attempt proposed, or cannot be read
// (ErrNeedsApproval).
func keptPolicyAllowsNewAttempt(ctx context.Context, g *idempotency.Guard) error {
	s, ok, err := foureyes.Load(ctx, g, nil)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrNeedsApproval, err)
	case ok && s.Requires("reopen-new-attempt"):
		return fmt.Errorf("%w: the four-eyes policy kept in the backend (%s) wants a reopen with a new attempt proposed and approved by another operator", ErrNeedsApproval, s.Policy)
	}
	return nil
}

// reopen is Reopen; sameKey lets a decline be reopened under its key (the
// command line's --same-key: the "decline" was a --corebank-declines entry
// that took an answer that was not final for one); prevToken and token are
// ReopenFenced's; hardDecline lets a new attempt present a hard decline
// again (ReopenFencedHardDecline).
func reopen(ctx context.Context, g *idempotency.Guard, id, reason string, newAttempt, sameKey, hardDecline bool, operator, prevToken, token string) (driver.Record, error) {
	// The reason is free text: an account number typed into it is kept
	// masked (the record's reason and history, shown by the console and
	// show), as everything else a record keeps.
	reason = charge.MaskText(reason)
	if newAttempt && prevToken == "" {
		// Every reopen goes through here, so the kept policy is asked
		// here too, whoever calls: a new attempt no approval carries (an
		// approval's run is fenced on the record it froze) is refused
		// where the backend's four-eyes settings want it proposed — and
		// where they cannot be read.
		if err := keptPolicyAllowsNewAttempt(ctx, g); err != nil {
			return driver.Record{}, err
		}
	}
	if !newAttempt && !sameKey {
		// An advice, read before the guard's own read: the guard's write
		// is conditional on the record it reads, whatever this one said.
		if cur, err := g.Get(ctx, id); err == nil && cur.State == driver.StateFailed && charge.DeclinedDetail(cur.Detail) {
			return cur, ErrDeclinedSameKey
		}
	}
	eligible := charge.EligibleForNewGeneration
	if hardDecline {
		eligible = func(r driver.Record) error {
			if err := charge.EligibleForNewGeneration(r); !errors.Is(err, charge.ErrHardDecline) {
				return err
			}
			return nil
		}
	}
	return g.Reopen(ctx, id, reason, idempotency.ReopenOptions{NewGeneration: newAttempt,
		Eligible: eligible, Operator: operator, PrevToken: prevToken, Token: token})
}

// ReopenOptions are a reopen asked for on the command line.
type ReopenOptions struct {
	ID, Reason, Operator string
	NewAttempt           bool
	// SameKey reopens a decline under its old bank key (refused otherwise:
	// ErrDeclinedSameKey), for a "decline" that was not the bank's final word.
	SameKey   bool
	Retention time.Duration // of the reopened record
	JSON      bool
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
	rec, err := reopen(ctx, guard, id, o.Reason, o.NewAttempt, o.SameKey, false, o.Operator, "", "")
	switch {
	case errors.Is(err, ErrDeclinedSameKey):
		return fmt.Errorf("%s was declined by the bank (%s); reopening it under the same bank key %s is declined again; use: chargerecovery reopen --new-attempt --reason %q %s (a debit under the next bank key). Only if that answer was not the bank's final word (a --corebank-declines entry that took a non-final answer for a decline) reopen it under the same key with --same-key",
			id, charge.Clip(rec.Detail, 120), charge.BankKey(rec.Key, rec.Generation), charge.MaskText(o.Reason), id)
	case errors.Is(err, idempotency.ErrNotFound):
		return fmt.Errorf("no idempotency record for %s (never claimed, or past its retention): nothing to reopen; redriving its message debits it as a new charge", id)
	case errors.Is(err, idempotency.ErrNotFailed):
		return fmt.Errorf("%s is %s, not FAILED: only a FAILED record is reopened (a DONE charge was debited; an IN_PROGRESS one is reclaimed by its next delivery)", id, rec.State)
	case errors.Is(err, charge.ErrHardDecline):
		code := charge.DeclineCode(rec.Detail)
		why, _ := charge.HardDecline(code)
		return fmt.Errorf("--new-attempt refused: %s was declined %s (%s), a hard decline: it is never presented again under a new key (nothing done)", id, charge.Printable(code), why)
	case errors.Is(err, idempotency.ErrNotEligible):
		return fmt.Errorf("--new-attempt refused: %w; reopen without --new-attempt retries under the same key", err)
	case err != nil:
		return err
	}
	AuditLog(o.Audit).LogAttrs(ctx, slog.LevelWarn, "FAILED charge reopened by an operator",
		slog.Bool("audit", true), slog.String("action", reopenAction(o.NewAttempt)), slog.String("result", "reopened"), slog.String("charge_id", charge.ShowID(rec.Key)), slog.String("reason", charge.MaskText(o.Reason)),
		slog.String("previous_status", rec.PrevStatus), slog.String("previous_detail", rec.PrevDetail),
		slog.Int("attempt", rec.Attempt), slog.Int("reopens", rec.Reopens), slog.Int("generation", rec.Generation),
		slog.String("bank_key", charge.ShowBankKey(charge.BankKey(rec.Key, rec.Generation))), slog.String("operator", o.Operator))
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
