package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/reconcile/statement"
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
			kinds = append(kinds, string(b.Kind))
		}
		return Resolved{}, fmt.Errorf("%w: %s has %s: give --kind", ErrAmbiguous, req.ChargeID, strings.Join(kinds, ", "))
	}
	b := open[0]
	if req.BreakID != "" && b.ID != req.BreakID {
		return Resolved{Break: b}, fmt.Errorf("%w: %s's %s break is %s now, not %s", ErrBreakChanged, req.ChargeID, b.Kind, b.ID, req.BreakID)
	}
	collect := b.Kind == FailedButPosted && !req.Refunded && b.collectable
	if b.Kind == PostedNotRecorded || collect {
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
// says so.
func adoptedResult(id string, p statement.Posting, ref string, req ResolveRequest) (status, detail, notice string) {
	if req.NoticeSent {
		return string(charge.Debited), ref, "the pre-debit notice went out (the operator's word)"
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

// adopt records the posting of an IN_PROGRESS record whose lease passed:
// the record is reclaimed under its own fingerprint (so that no consumer
// holds it meanwhile), completed DONE DEBITED with the bank's reference,
// and given a history line. Nothing is debited and no notice is sent. A
// FAILED record is reopened into it, a WAITING one (a retry scheduled)
// taken before its next attempt.
func adopt(ctx context.Context, store driver.Store, req ResolveRequest, b Break) (driver.Record, error) {
	p := b.judged // the posting the run judged: the one that stands, in the period
	if p.BankKey == "" || p.Reversal {
		return driver.Record{}, fmt.Errorf("reconcile: %s: no single posting stands to record", b.ChargeID)
	}
	rec, err := req.Guard.Get(ctx, b.ChargeID)
	if err != nil {
		return driver.Record{}, fmt.Errorf("record %s: %w", b.ChargeID, err)
	}
	if max(rec.Generation, 1) != b.Generation || string(rec.State) != b.State {
		return driver.Record{}, fmt.Errorf("reconcile: %s changed since it was read (now %s generation %d): run reconcile again", b.ChargeID, rec.State, rec.Generation)
	}
	ref := charge.MaskText(p.Reference, p.Account)
	if ref == "" {
		ref = "statement " + charge.MaskText(p.Where, p.Account)
	}
	status, detail, notice := adoptedResult(b.ChargeID, p, ref, req)
	now := req.Guard.Now()
	line := charge.Clip(fmt.Sprintf("%s %s by %s: posted %s under %s, booked %s, reference %s; no debit; %s; why: %s",
		AdoptedLine, now.UTC().Format(time.RFC3339), req.Operator, p.Amount, p.BankKey, p.BookingDate.Format(time.DateOnly), ref, notice, req.Reason),
		driver.MaxDetailBytes-8)
	var lease idempotency.Lease
	var restore func() error // undoes the taking of a WAITING record
	if rec.State == driver.StateFailed {
		// Collected: FAILED → IN_PROGRESS under a token of ours with a
		// LIVE lease, on the very record read (one conditional write), so
		// that no delivery can claim it before it is DONE.
		token, err := newToken()
		if err != nil {
			return driver.Record{}, err
		}
		until := now.Add(req.Guard.Lease())
		reopened, err := store.Reopen(ctx, driver.ReopenRequest{Key: rec.Key, Token: token, Reason: "reconciliation: the bank posted it: " + req.Reason,
			Now: now, LeaseUntil: until, ExpiresAt: rec.ExpiresAt, PrevToken: rec.Token, Generation: max(rec.Generation, 1),
			History: append(slices.Clip(rec.History), line)})
		if err != nil {
			return driver.Record{}, fmt.Errorf("record %s changed since it was read (%w): run reconcile again", b.ChargeID, err)
		}
		lease = idempotency.Lease{Key: rec.Key, Token: token, Until: until, Attempt: reopened.Attempt}
	} else if rec.State == driver.StateWaiting {
		// Collected before its next attempt (a retry scheduled after the
		// decline whose generation the bank posted after all): the record
		// is taken from WAITING as its next attempt would take it — a
		// claim that finds it due (the request's LeaseExpiredBy at its
		// not-before) — under a token of ours with a live lease, in one
		// conditional write, fenced against a delivery resuming it
		// meanwhile; then DONE, so that the schedule never debits again.
		creq, err := req.Guard.ClaimRequest(b.ChargeID, rec.Fingerprint)
		if err != nil {
			return driver.Record{}, err
		}
		creq.LeaseExpiredBy = maxTime(creq.LeaseExpiredBy, rec.LeaseUntil)
		res, err := store.Claim(ctx, creq)
		if err != nil {
			return driver.Record{}, fmt.Errorf("record %s: %w", b.ChargeID, err)
		}
		c := idempotency.ClaimOf(creq, res)
		if c.Outcome != idempotency.Acquired || max(c.Record.Generation, 1) != b.Generation {
			if c.Outcome.Owned() {
				_ = req.Guard.Yield(ctx, c.Lease()) // not the record read: give it back at once
			}
			return driver.Record{}, fmt.Errorf("reconcile: %s changed since it was read (now %s, %s): run reconcile again", b.ChargeID, c.Record.State, c.Outcome)
		}
		lease = c.Lease()
		// Not adopted after all (the store failed the DONE): the record
		// goes back to WAITING as it was, so that no delivery reclaims it
		// after the lease and debits the next generation meanwhile.
		restore = func() error {
			history := rec.History
			if history == nil {
				history = []string{}
			}
			return store.Finish(context.WithoutCancel(ctx), driver.FinishRequest{Key: rec.Key, Token: lease.Token, State: driver.StateWaiting,
				Status: rec.Status, Detail: rec.Detail, Now: req.Guard.Now(), ExpiresAt: rec.ExpiresAt, NotBefore: rec.LeaseUntil,
				Generation: max(rec.Generation, 1), History: history})
		}
	} else {
		c, err := req.Guard.Claim(ctx, b.ChargeID, rec.Fingerprint)
		if err != nil {
			return driver.Record{}, fmt.Errorf("record %s: %w", b.ChargeID, err)
		}
		if c.Outcome != idempotency.Reclaimed || max(c.Record.Generation, 1) != b.Generation {
			return driver.Record{}, fmt.Errorf("reconcile: %s changed since it was read (now %s, %s): run reconcile again", b.ChargeID, c.Record.State, c.Outcome)
		}
		lease = c.Lease()
	}
	if err := req.Guard.Complete(ctx, lease, status, detail); err != nil {
		if restore != nil {
			if rerr := restore(); rerr != nil {
				return driver.Record{}, fmt.Errorf("record %s: %w; and it could not be put back to WAITING (%v): it is IN_PROGRESS under this resolve's lease until %s, and a delivery after that would debit its next generation", b.ChargeID, err, rerr, lease.Until.UTC().Format(time.RFC3339))
			}
			return driver.Record{}, fmt.Errorf("record %s: %w (not adopted: the record is WAITING again, as it was; run resolve again)", b.ChargeID, err)
		}
		return driver.Record{}, fmt.Errorf("record %s: %w", b.ChargeID, err)
	}
	done, err := req.Guard.Get(ctx, b.ChargeID)
	if err != nil {
		return driver.Record{}, fmt.Errorf("record %s: %w", b.ChargeID, err)
	}
	if rec.State == driver.StateFailed {
		return done, nil // the line went in with the reopening
	}
	am, ok := store.(driver.Amender)
	if !ok {
		return done, nil // DONE stands; the audit trail holds the line
	}
	amended, err := am.Amend(ctx, driver.AmendRequest{Key: done.Key, Token: done.Token, FromStatus: done.Status, Status: done.Status,
		Detail: done.Detail, History: append(append([]string(nil), done.History...), line), Now: now})
	if err != nil {
		return done, fmt.Errorf("record %s is DONE, but its history line was not written: %w", b.ChargeID, err)
	}
	return amended, nil
}

// newToken is a fencing token nobody holds (128 random bits).
func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
