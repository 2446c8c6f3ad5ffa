package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// ResolvedStatus is the status of a resolution's record.
const ResolvedStatus = "RESOLVED"

// ResolveRequest is an operator's closing of one charge's break.
type ResolveRequest struct {
	ChargeID string
	// Kind chooses the break when the charge has several.
	Kind Kind
	// Reason is kept in the resolution (and, for an adoption, the
	// record's history). Required.
	Reason   string
	Operator string
	// Guard writes the adoption and the resolution (the store's, with
	// serve's lease, retention and skew margin).
	Guard *idempotency.Guard
	// Unverified adopts a posting that could not be checked against the
	// charge (Break.Unverified): the operator checked it by hand.
	Unverified bool
	// NoticeSent records an adopted posting DEBITED (the pre-debit notice
	// is known to have gone out); by default it is recorded
	// DEBITED_NOTIFICATION_FAILED with the notice kept, for renotify.
	NoticeSent bool
	// Refunded closes a failed_but_posted break by marking it (the bank
	// gave the money back; the record stays FAILED, or WAITING with its
	// retry schedule). By default the
	// posting is recorded as collected: the record becomes DONE, so the
	// charge is never debited again.
	Refunded bool
	// BreakID, when set, is the break to close: a break found now with
	// another id (the record or the postings changed since it was seen,
	// e.g. when a proposal froze it) is refused (ErrBreakChanged), nothing
	// written.
	BreakID string
}

// Resolved is what Resolve did.
type Resolved struct {
	Break Break `json:"break"`
	// Action is "adopted" (the record is DONE with the posting's
	// reference) or "marked" (the break is marked resolved).
	Action string `json:"action"`
	// Record is the charge's record after an adoption.
	Record *driver.Record `json:"-"`
}

// Collects reports whether resolving b (with --refunded or not) records
// its posting as collected — a write of money to the charge's record,
// which four-eyes' reconcile-adopt term asks a second operator for: a
// posted_not_recorded posting adopted; a failed_but_posted posting, or one
// of a posted_twice break of a record still open to a debit, collected;
// an amount_mismatch only under a declined generation of a WAITING record
// (collected so that the schedule does not debit again while the bank
// corrects the amount; any other is refused until refunded or corrected).
// Every other resolution only marks the break.
func (b Break) Collects(refunded bool) bool {
	return b.Kind == PostedNotRecorded || (!refunded && !b.mismatch && (b.Kind == FailedButPosted || b.open))
}

// ErrNoBreak: the charge has no open break in the statement (none, or
// resolved already).
var ErrNoBreak = errors.New("reconcile: no open break for this charge")

// ErrUnchecked: an adoption of a posting that could not be checked
// against the charge, without the operator's word.
var ErrUnchecked = errors.New("reconcile: posting not checked against the charge")

// ErrBreakChanged: the break found now is not the one the request named
// (ResolveRequest.BreakID).
var ErrBreakChanged = errors.New("reconcile: the break changed since it was seen")

// ErrAmbiguous: the charge has breaks of several kinds; say which.
var ErrAmbiguous = errors.New("reconcile: several breaks for this charge")

// Resolve closes req.ChargeID's break in the statement read: it runs the
// reconciliation for that charge alone (as it is now, not as an earlier
// report said), then adopts a posted_not_recorded posting — the record
// moves to DONE DEBITED with the bank's reference and a history line, with
// no debit and no notice, and the adoption kept as the break's resolution
// — or marks any other kind resolved with the reason. opts.ChargeID is set
// from req.
func Resolve(ctx context.Context, opts Options, read Postings, req ResolveRequest) (Resolved, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return Resolved{}, errors.New("say why (--reason): it is kept with the resolution")
	}
	if req.Guard == nil {
		return Resolved{}, errors.New("reconcile: Resolve needs a Guard")
	}
	if req.ChargeID == "" {
		return Resolved{}, errors.New("reconcile: which charge? (an empty id would resolve any charge's break)")
	}
	opts.ChargeID = req.ChargeID
	rep, err := Run(ctx, opts, read)
	if err != nil {
		return Resolved{}, err
	}
	var open []Break
	for _, b := range rep.Breaks {
		if req.Kind == "" || b.Kind == req.Kind {
			open = append(open, b)
		}
	}
	if i := slices.IndexFunc(open, func(b Break) bool { return b.ID == req.BreakID }); req.BreakID != "" && len(open) > 1 && i >= 0 {
		// A charge id shown masked may stand for several (foreign keys
		// with the same last four): the break id says which.
		open = open[i : i+1]
	}
	switch {
	case len(open) == 0 && rep.Resolved > 0:
		return Resolved{}, fmt.Errorf("%w: %s's break is resolved already", ErrNoBreak, req.ChargeID)
	case len(open) == 0 && req.Kind != "":
		return Resolved{}, fmt.Errorf("%w: %s has no %s break in this statement", ErrNoBreak, req.ChargeID, req.Kind)
	case len(open) == 0:
		return Resolved{}, fmt.Errorf("%w: %s matches the statement", ErrNoBreak, req.ChargeID)
	case len(open) > 1:
		var kinds []string
		for _, b := range open {
			kinds = append(kinds, string(b.Kind)+" (break "+b.ID+")")
		}
		return Resolved{}, fmt.Errorf("%w: %s has %s: give --kind (or the break's id)", ErrAmbiguous, req.ChargeID, strings.Join(kinds, ", "))
	}
	b := open[0]
	if req.BreakID != "" && b.ID != req.BreakID {
		return Resolved{Break: b}, fmt.Errorf("%w: %s's %s break is %s now, not %s", ErrBreakChanged, req.ChargeID, b.Kind, b.ID, req.BreakID)
	}
	money := b.Kind == FailedButPosted || b.open // money stands, and the record is open to a debit
	if b.mismatch && !req.Refunded {
		return Resolved{Break: b}, fmt.Errorf("%w: %s's posting is not the charge's amount or account, and the record is %s at generation %d: it still debits the charge at its next attempt. "+
			"Have the bank refund the posting, then resolve --refunded (the schedule goes on); or have it corrected to the charge's amount: the next statement's posting is then collected",
			ErrNotCollectable, b.ChargeID, b.State, b.Generation)
	}
	if money && !req.Refunded && !b.collectable {
		// Marking it would close the break with the posting recorded
		// nowhere: the money kept and the charge still open to a debit.
		return Resolved{Break: b}, fmt.Errorf("%w: %s's %s break: the record is %s at generation %d (%s); "+
			"if a delivery holds it (IN_PROGRESS under a live lease) it is debiting that generation now: wait until it finishes, then run reconcile again "+
			"(a second posting shows as posted_twice: have one refunded); if the bank refunds the posting, resolve --refunded",
			ErrNotCollectable, b.ChargeID, b.Kind, b.State, b.Generation, b.Detail)
	}
	if b.Collects(req.Refunded) {
		if b.Unverified && !req.Unverified {
			return Resolved{Break: b}, fmt.Errorf("%w: %s's posting could not be checked against the charge (no narrative in the statement, or no fingerprint key given): check its amount and account by hand, then resolve with --unverified", ErrUnchecked, b.ChargeID)
		}
		rec, err := adopt(ctx, opts.Store, req, b)
		if err != nil {
			return Resolved{Break: b}, err
		}
		// The adoption is kept as the break's resolution too, so that a
		// report made before it (the console's) shows it closed.
		if err := mark(ctx, req, b); err != nil {
			return Resolved{Break: b, Action: "adopted", Record: &rec}, fmt.Errorf("%s is adopted (DONE), but its resolution was not kept: %w", b.ChargeID, err)
		}
		return Resolved{Break: b, Action: "adopted", Record: &rec}, nil
	}
	if err := mark(ctx, req, b); err != nil {
		return Resolved{Break: b}, err
	}
	return Resolved{Break: b, Action: "marked"}, nil
}

// AdoptedLine begins the history line of an adopted posting.
const AdoptedLine = "adopted from the bank's statement"

// adoptedResult is the status and detail an adoption records, and what
// its history line says of the notice: DEBITED when the operator says the
// notice went out; else DEBITED_NOTIFICATION_FAILED keeping the notice
// built from the posting (account masked), which renotify sends — the
// consumer most likely died before it notified; without the charge type
// and due date in the narrative no notice can be built, and the record
// says so; nor from a posting of another amount than the charge's
// (mismatch: an amount_mismatch collected), which the bank is to correct.
func adoptedResult(id string, p statement.Posting, ref string, req ResolveRequest, mismatch bool) (status, detail, notice string) {
	if req.NoticeSent {
		return string(charge.Debited), ref, "the pre-debit notice went out (the operator's word)"
	}
	if mismatch {
		return string(charge.DebitedNotificationFailed), ref, "no notice built: the amount posted is not the charge's (amount_mismatch), the bank to correct it; tell the customer by hand once it has"
	}
	typ, due, ok := NarrativeParts(p.Narrative)
	if ok {
		d, err := time.Parse(time.DateOnly, due)
		if err == nil {
			c := charge.Charge{ID: id, AccountID: p.Account, Amount: p.Amount, Type: typ, DueDate: d}
			if n, err := charge.NoticeOf(c, charge.DebitReceipt{Reference: ref}, req.Guard.Now()).Marshal(); err == nil {
				return string(charge.DebitedNotificationFailed), string(n), "the pre-debit notice kept for renotify"
			}
		}
	}
	return string(charge.DebitedNotificationFailed), ref, "no notice known to be sent and none can be built (no charge type and due date in the narrative): tell the customer by hand"
}

// resolution is what a resolution's record keeps (its Detail).
type resolution struct {
	Kind     Kind      `json:"kind"`
	ChargeID string    `json:"chargeId"`
	Reason   string    `json:"reason"`
	Operator string    `json:"operator"`
	At       time.Time `json:"at"`
}

// mark keeps b's resolution: a record of its own under b's resolution
// key, claimed and completed (a second resolution of the same break finds
// it there).
func mark(ctx context.Context, req ResolveRequest, b Break) error {
	key := b.resolutionKey()
	c, err := req.Guard.Claim(ctx, key, b.ID)
	if err != nil {
		return fmt.Errorf("resolution of %s: %w", b.ChargeID, err)
	}
	if !c.Outcome.Owned() {
		return fmt.Errorf("%w: %s's %s break is being resolved, or was, by another run (%s)", ErrNoBreak, b.ChargeID, b.Kind, c.Outcome)
	}
	detail, err := json.Marshal(resolution{Kind: b.Kind, ChargeID: b.ChargeID, Reason: charge.Clip(req.Reason, 500), Operator: req.Operator, At: req.Guard.Now().UTC()})
	if err != nil {
		return err
	}
	if err := req.Guard.Complete(ctx, c.Lease(), ResolvedStatus, string(detail)); err != nil {
		return fmt.Errorf("resolution of %s: %w", b.ChargeID, err)
	}
	return nil
}

// ErrNotCollectable: a failed_but_posted break whose record cannot be
// recorded as collected now (a delivery holds it under a live lease, or it
// is DONE under another generation); the break stays open.
var ErrNotCollectable = errors.New("reconcile: the posting cannot be recorded as collected now")

// ErrChanged: the record is not the one the break was judged on (another
// state, token or generation); nothing was written.
var ErrChanged = errors.New("reconcile: the record changed since it was read")

// adopt records the posting b judged as collected, in ONE conditional
// write (driver.Collector): the record read — FAILED, WAITING, or
// IN_PROGRESS with its lease passed by the skew margin — becomes DONE at
// the generation the bank posted, under a token nobody holds, with the
// bank's reference and a history line, iff it is still in the state, under
// the token and at the generation read. No lease is taken or given up:
// a delivery meanwhile finds the record as it was (and the collect is
// refused: run reconcile again) or DONE (a duplicate: no debit). Nothing
// is debited and no notice is sent.
func adopt(ctx context.Context, store driver.Store, req ResolveRequest, b Break) (driver.Record, error) {
	p := b.judged // the posting the run judged: the one that stands, in the period
	if p.BankKey == "" || p.Reversal {
		return driver.Record{}, fmt.Errorf("reconcile: %s: no single posting stands to record", b.ChargeID)
	}
	_, posted := SplitBankKey(p.BankKey)
	if posted < 1 {
		return driver.Record{}, fmt.Errorf("reconcile: %s: the posting's bank key %q names no generation", b.ChargeID, p.BankKey)
	}
	co, ok := store.(driver.Collector)
	if !ok {
		return driver.Record{}, fmt.Errorf("reconcile: %s: the store cannot record a collection in one conditional write (driver.Collector): nothing written", b.ChargeID)
	}
	id := cmp.Or(b.key, b.ChargeID) // the record's key as read (ChargeID may be shown masked)
	rec, err := req.Guard.Get(ctx, id)
	if err != nil {
		return driver.Record{}, fmt.Errorf("record %s: %w", b.ChargeID, err)
	}
	if max(rec.Generation, 1) != b.Generation || string(rec.State) != b.State {
		return driver.Record{}, fmt.Errorf("%w: %s is now %s generation %d: run reconcile again", ErrChanged, b.ChargeID, rec.State, max(rec.Generation, 1))
	}
	ref := charge.ShowRef(p.Reference, p.Account)
	if ref == "" {
		ref = "statement " + charge.MaskText(p.Where, p.Account)
	}
	status, detail, notice := adoptedResult(id, p, ref, req, b.Kind == AmountMismatch)
	// The guard's request for now: a fresh token, the skew margin (a
	// lease is collected over only once passed by it), the retention.
	creq, err := req.Guard.ClaimRequest(id, rec.Fingerprint)
	if err != nil {
		return driver.Record{}, err
	}
	now := creq.Now
	line := charge.Clip(fmt.Sprintf("%s %s by %s: posted %s under %s, booked %s, reference %s; no debit; %s; why: %s",
		AdoptedLine, now.UTC().Format(time.RFC3339), req.Operator, p.Amount, p.BankKey, p.BookingDate.Format(time.DateOnly), ref, notice, req.Reason),
		driver.MaxDetailBytes-8)
	done, err := co.Collect(ctx, driver.CollectRequest{Key: rec.Key, From: rec.State, Token: rec.Token, Generation: max(rec.Generation, 1),
		LeaseExpiredBy: creq.LeaseExpiredBy, NewToken: creq.Token, PostedGeneration: posted, Status: status, Detail: detail,
		History: append(slices.Clip(rec.History), line), Now: now, ExpiresAt: creq.ExpiresAt})
	switch {
	case errors.Is(err, driver.ErrStale):
		return driver.Record{}, fmt.Errorf("%w: %s is now %s generation %d (read %s generation %d): nothing written; run reconcile again",
			ErrChanged, b.ChargeID, done.State, max(done.Generation, 1), rec.State, max(rec.Generation, 1))
	case errors.Is(err, driver.ErrNotFound):
		return driver.Record{}, fmt.Errorf("record %s: %w (gone since it was read): run reconcile again", b.ChargeID, err)
	case err != nil:
		return driver.Record{}, fmt.Errorf("record %s: the collection was sent and its answer lost (%w): it may or may not have been written; run resolve again: it finds the record collected (DONE, no break) or collects it", b.ChargeID, err)
	}
	return done, nil
}
