package idempotency

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Clock tells the time. Inject one in tests; the default is the wall
// clock.
type Clock interface{ Now() time.Time }

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Outcome is how a claim, or a Do, ended. What each asks of the caller:
//
//   - Acquired: the work ran here, once. Ack (after checking Do's error).
//   - Reclaimed: the work ran here after an earlier attempt vanished
//     mid-way; its effect may have happened before (Run.Reclaimed told the
//     work): key the downstream call. Ack.
//   - DuplicateDone: it ran before. Do not run it; answer with the stored
//     result (DoResult.Done, TypedResult.Value) and ack.
//   - DuplicateInProgress: another worker holds the key now. Do not ack;
//     retry after DoResult.RetryAfter.
//   - DuplicateFailed: it failed for good before (Record.Status, Detail).
//     Ack or dead-letter; an operator may Reopen it.
//   - Conflict: the key came with another payload. Never run it;
//     dead-letter and tell the sender.
//   - Failed: the work ran and failed for good (ErrPermanent; DoResult.Err);
//     recorded FAILED. Ack or dead-letter.
//   - Unfinished: the work ran and failed, retryably (DoResult.Err). Do
//     not ack; the next delivery runs it once the lease passes (at once if
//     the error wraps ErrNotStarted).
//   - LeaseLost: another worker took the key over while the work ran.
//     Neither ack nor record; the new holder owns the result.
//   - Waiting: the work waits until DoResult.NotBefore (a *Wait). Deliver
//     it again then.
type Outcome int

// The outcomes. Acquired and Reclaimed mean the caller holds the key (Do
// ran the work); every other outcome means the work did not run now. Each
// says what it asks of the caller.
const (
	// Acquired: the key was free; the work ran once, under this claim. Ack
	// the message (Do recorded the result; check its error first).
	Acquired Outcome = iota + 1
	// Reclaimed: an earlier attempt held the key and vanished (its lease
	// passed); the work ran again here. Its effect may have happened twice
	// downstream unless the work asked first (Run.Reclaimed says so): use
	// a downstream idempotency key. Ack as for Acquired.
	Reclaimed
	// DuplicateDone: the work ran before and its result is stored
	// (DoResult.Done, DoTyped's Value). Do not run it; answer with the
	// stored result and ack.
	DuplicateDone
	// DuplicateInProgress: another worker holds a live lease on the key.
	// Do not run it and do not ack: retry after DoResult.RetryAfter (when
	// that worker's lease would have passed); its result will be stored.
	DuplicateInProgress
	// DuplicateFailed: the work failed permanently before (the record is
	// FAILED; Record.Status and Detail say why). Do not run it; ack or
	// dead-letter it, and let an operator Reopen it if it should run.
	DuplicateFailed
	// Conflict: the key was used with another fingerprint (another
	// payload). Never run it: it is a different request reusing a key.
	// Dead-letter it and tell the sender.
	Conflict
	// Failed: the work ran and failed permanently (ErrPermanent); the key
	// is recorded FAILED with DoResult.Err's text. Ack or dead-letter it;
	// duplicates get DuplicateFailed.
	Failed
	// Unfinished: the work ran and returned a retryable error
	// (DoResult.Err). The lease is kept until it passes — the effect may
	// have happened — unless the error wraps ErrNotStarted (then it is
	// given up at once). Do not ack: let the message be delivered again.
	Unfinished
	// LeaseLost: the lease was taken over while the work ran (it ran
	// longer than the lease without a heartbeat). Neither ack nor record
	// anything: the new holder owns the key and its result.
	LeaseLost
	// Waiting: the key is WAITING until DoResult.NotBefore — the work
	// returned a *Wait now, or an earlier run did and the time has not
	// come. The work does not run; deliver it again at NotBefore.
	Waiting
)

var outcomeNames = map[Outcome]string{
	Acquired:            "acquired",
	Reclaimed:           "reclaimed",
	DuplicateDone:       "duplicate_done",
	DuplicateInProgress: "duplicate_in_progress",
	DuplicateFailed:     "duplicate_failed",
	Conflict:            "conflict",
	Failed:              "failed",
	Unfinished:          "unfinished",
	LeaseLost:           "lease_lost",
	Waiting:             "waiting",
}

// String is the outcome's name; the zero Outcome (a call refused before
// any claim: invalid input, the store unreachable; see its error) is
// "none".
func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	if o == 0 {
		return "none"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Owned reports whether a claim outcome gives the caller the key.
func (o Outcome) Owned() bool { return o == Acquired || o == Reclaimed }

// Options configure a Guard. The zero value of each field takes its default.
type Options struct {
	// Lease is how long a claim holds the key before another worker may
	// reclaim it. Default 60s. Keep it longer than the slowest expected
	// unit of work between heartbeats.
	Lease time.Duration
	// Retention is how long a record is kept after its last write; past it
	// the key counts as absent. Default 30 days: longer than SQS's maximum
	// retention (14 days) plus a DLQ redrive window.
	Retention time.Duration
	// SkewMargin is how long past its LeaseUntil a lease must be before
	// another claimant may take it: the largest disagreement between the
	// clocks of the hosts sharing the store that the guard tolerates (every
	// store compares against the claimant's clock). Default 2s (NTP keeps
	// hosts within milliseconds); negative: no margin (tests with a manual
	// clock). A host whose clock runs ahead by more than the margin can
	// reclaim a live lease, and a second debit with the same idempotency key
	// may then run while the first is still in flight.
	SkewMargin time.Duration
	// Clock defaults to the wall clock. A Clock that also has a method
	// Sleep(time.Duration) is used for the pauses between the tries of a
	// result's write, instead of the wall clock.
	Clock Clock
	// NewToken makes fencing tokens. Default: 128 random bits, hex.
	NewToken func() (string, error)
}

// Defaults for Options, and the shortest fingerprint key.
const (
	DefaultLease      = 60 * time.Second
	DefaultRetention  = 30 * 24 * time.Hour
	DefaultSkewMargin = 2 * time.Second
	// MinFingerprintKey is the shortest key NewFingerprinter accepts, in
	// bytes.
	MinFingerprintKey = 32
)

// Guard runs the claim state machine over a store.
type Guard struct {
	store driver.Store
	opts  Options
}

// NewGuard returns a Guard over store. It returns ErrInvalid for a nil store
// or a negative duration.
func NewGuard(store driver.Store, opts Options) (*Guard, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if opts.Lease < 0 || opts.Retention < 0 {
		return nil, fmt.Errorf("%w: lease and retention must not be negative", ErrInvalid)
	}
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.Retention == 0 {
		opts.Retention = DefaultRetention
	}
	switch {
	case opts.SkewMargin == 0:
		opts.SkewMargin = DefaultSkewMargin
	case opts.SkewMargin < 0:
		opts.SkewMargin = 0
	}
	if opts.Retention < opts.Lease {
		return nil, fmt.Errorf("%w: retention %s is shorter than the lease %s", ErrInvalid, opts.Retention, opts.Lease)
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	if opts.NewToken == nil {
		opts.NewToken = randomToken
	}
	return &Guard{store: store, opts: opts}, nil
}

// Lease returns the configured lease duration.
func (g *Guard) Lease() time.Duration { return g.opts.Lease }

// ReclaimableAt is when a lease that runs until leaseUntil may be taken
// by another claimant: leaseUntil plus the skew margin.
func (g *Guard) ReclaimableAt(leaseUntil time.Time) time.Time {
	return leaseUntil.Add(g.opts.SkewMargin)
}

// Now returns the guard's clock reading, to the millisecond (the resolution
// every store keeps).
func (g *Guard) Now() time.Time { return g.opts.Clock.Now().Truncate(time.Millisecond) }

// Claim is the result of Guard.Claim.
type Claim struct {
	Outcome Outcome
	// Record is the record we wrote (Owned outcomes) or the existing one.
	Record driver.Record
}

// Lease returns the handle the claimant uses for later writes. Only
// meaningful when Outcome.Owned().
func (c Claim) Lease() Lease {
	r := c.Record
	return Lease{Key: r.Key, Token: r.Token, Until: r.LeaseUntil, Attempt: r.Attempt, claimed: &r}
}

// Lease is a held claim.
type Lease struct {
	Key     string
	Token   string
	Until   time.Time
	Attempt int

	claimed *driver.Record // the record as the claim left it (see driver.FinishRequest.Claimed)
}

// Claim tries to take key for fingerprint. It costs one store round trip in
// every case but a store that cannot return the existing record on a failed
// condition. The error is ErrInvalid for an empty key, else whatever the
// store returned (ErrUnavailable when it could not be reached).
func (g *Guard) Claim(ctx context.Context, key, fingerprint string) (Claim, error) {
	return g.claim(ctx, key, fingerprint, "")
}

// claim is Claim with the record's summary (DoOptions.Summary).
func (g *Guard) claim(ctx context.Context, key, fingerprint, summary string) (Claim, error) {
	req, err := g.ClaimRequest(key, fingerprint)
	if err != nil {
		return Claim{}, err
	}
	req.Summary = summary
	res, err := g.store.Claim(ctx, req)
	if err != nil {
		return Claim{}, err
	}
	return ClaimOf(req, res), nil
}

// ClaimRequest is the claim this guard writes for key and fingerprint now:
// a fresh token, the lease, the skew margin and the retention. Guard.Claim
// writes it with the store's Claim; a queue that claims in its receive's
// transaction (queue.ClaimPolicy) writes the same request there.
func (g *Guard) ClaimRequest(key, fingerprint string) (driver.ClaimRequest, error) {
	if key == "" {
		return driver.ClaimRequest{}, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	token, err := g.opts.NewToken()
	if err != nil {
		return driver.ClaimRequest{}, fmt.Errorf("idempotency: new token: %w", err)
	}
	now := g.Now()
	return driver.ClaimRequest{
		Key:            key,
		Token:          token,
		Fingerprint:    fingerprint,
		Now:            now,
		LeaseExpiredBy: now.Add(-g.opts.SkewMargin),
		LeaseUntil:     now.Add(g.opts.Lease),
		ExpiresAt:      now.Add(g.opts.Retention),
	}, nil
}

// ClaimOf is the claim a store's result res to req amounts to: what
// Guard.Claim returns for it. It is for code that sees a store's answer
// itself — a claim a queue made in its receive's transaction
// (driver.Bound), a store wrapper counting claim outcomes.
func ClaimOf(req driver.ClaimRequest, res driver.ClaimResult) Claim {
	return Claim{Outcome: classify(res, req.Token, req.Fingerprint), Record: res.Record}
}

// classify maps a store's ClaimResult to an Outcome for a claimant with
// token and fingerprint. A different fingerprint on an existing record is a
// Conflict whatever its state; the work must never run for it. An
// IN_PROGRESS record under the claimant's own token means its claim landed
// and the store's answer was lost (the SDK retried the write, and the retry
// found our record): the key is ours.
func classify(res driver.ClaimResult, token, fingerprint string) Outcome {
	ours := token != "" && res.Record.Token == token &&
		res.Record.State == driver.StateInProgress && res.Record.Fingerprint == fingerprint
	switch {
	case res.Acquired && res.Reclaimed, !res.Acquired && ours && res.Record.Attempt > 1:
		return Reclaimed
	case res.Acquired, ours:
		return Acquired
	case res.Record.Fingerprint != fingerprint:
		return Conflict
	case res.Record.State == driver.StateDone:
		return DuplicateDone
	case res.Record.State == driver.StateFailed:
		return DuplicateFailed
	case res.Record.State == driver.StateWaiting:
		return Waiting
	default:
		return DuplicateInProgress
	}
}

// Complete records the work as DONE with the application's status and
// detail. ErrLeaseLost means the key is no longer ours. A status that
// starts with "TYPED " (DoTyped's) is ErrInvalid; nothing is
// written.
func (g *Guard) Complete(ctx context.Context, l Lease, status, detail string) error {
	if err := typedStatusError(status); err != nil {
		return err
	}
	return g.finish(ctx, l, driver.StateDone, status, detail)
}

// Fail records the work as permanently FAILED. ErrLeaseLost as Complete.
func (g *Guard) Fail(ctx context.Context, l Lease, status, detail string) error {
	return g.finish(ctx, l, driver.StateFailed, status, detail)
}

func (g *Guard) finish(ctx context.Context, l Lease, s driver.State, status, detail string) error {
	req, err := g.finishRequest(l, s, status, detail, driver.MaxDetailBytes)
	if err != nil {
		return err
	}
	return g.store.Finish(ctx, req)
}

// finishRequest is the write of the final state; detail is cut at limit
// (driver.MaxDetailBytes, or driver.MaxResultBytes for a typed result that
// DoTyped has already checked).
func (g *Guard) finishRequest(l Lease, s driver.State, status, detail string, limit int) (driver.FinishRequest, error) {
	if l.Key == "" || l.Token == "" {
		return driver.FinishRequest{}, fmt.Errorf("%w: lease without key or token", ErrInvalid)
	}
	now := g.Now()
	return driver.FinishRequest{
		Key: l.Key, Token: l.Token, State: s, Status: cut(status, driver.MaxDetailBytes), Detail: cut(detail, limit),
		Now: now, ExpiresAt: now.Add(g.opts.Retention), Claimed: l.claimed,
	}, nil
}

// withNote is req with note added to the history of the record the
// lease's claim left (no change for an empty note or a lease without it).
func withNote(req driver.FinishRequest, note string) driver.FinishRequest {
	if note == "" || req.Claimed == nil {
		return req
	}
	req.History = append(slices.Clip(req.Claimed.History), cut(oneLine(note), driver.MaxDetailBytes))
	return req
}

// Extend pushes the lease out to now + Lease (the heartbeat) and returns the
// extended lease. ErrLeaseLost means the key is no longer ours.
func (g *Guard) Extend(ctx context.Context, l Lease) (Lease, error) {
	if l.Key == "" || l.Token == "" {
		return l, fmt.Errorf("%w: lease without key or token", ErrInvalid)
	}
	now := g.Now()
	until := now.Add(g.opts.Lease)
	if err := g.store.Extend(ctx, driver.ExtendRequest{Key: l.Key, Token: l.Token, LeaseUntil: until, Now: now}); err != nil {
		return l, err
	}
	l.Until = until
	return l, nil
}

// Reopen turns the FAILED record of key back into one the next delivery
// claims at once (see driver.Store.Reopen), for an operator who fixed the cause of
// the failure. reason is kept in the record, and a history line says which
// generation ended how, when, by whom and why. With opts.NewGeneration the
// record moves to the next key generation (only where opts.Eligible
// allows). It reads the record and writes conditionally on that very
// record (its token; opts.PrevToken, when set, must be that token): a
// record failed again meanwhile is not reopened on the strength of the old
// read. It returns the reopened record;
// ErrNotFailed (with the record) when it is not FAILED, ErrNotEligible when
// the rule refuses a new generation, ErrNotFound when there is none.
func (g *Guard) Reopen(ctx context.Context, key, reason string, opts ReopenOptions) (driver.Record, error) {
	if key == "" || reason == "" {
		return driver.Record{}, fmt.Errorf("%w: reopen needs a key and a reason", ErrInvalid)
	}
	token := opts.Token
	if token == "" {
		var err error
		if token, err = g.opts.NewToken(); err != nil {
			return driver.Record{}, fmt.Errorf("idempotency: new token: %w", err)
		}
	}
	now := g.Now()
	// Read the record decided on; the write is conditional on its token.
	cur, err := g.store.Get(ctx, key, now)
	if err != nil {
		return driver.Record{}, err
	}
	if cur.State != driver.StateFailed || (opts.PrevToken != "" && cur.Token != opts.PrevToken) {
		return cur, ErrNotFailed
	}
	gen := max(cur.Generation, 1)
	next := gen
	if opts.NewGeneration {
		if opts.Eligible != nil {
			if err := opts.Eligible(cur); err != nil {
				return cur, fmt.Errorf("%w: %w", ErrNotEligible, err)
			}
		}
		next = gen + 1
	}
	entry := fmt.Sprintf("generation %d: %s %s (attempt %d); reopened %s by %s: %s", gen, cur.Status, cur.Detail, cur.Attempt,
		now.UTC().Format(time.RFC3339), cmp.Or(opts.Operator, "unknown"), reason)
	if next != gen {
		entry += fmt.Sprintf("; new generation %d", next)
	}
	history := append(slices.Clip(cur.History), cut(oneLine(entry), driver.MaxDetailBytes))
	return g.store.Reopen(ctx, driver.ReopenRequest{Key: key, Token: token, Reason: reason, Now: now,
		LeaseUntil: now.Add(-g.opts.SkewMargin), ExpiresAt: now.Add(g.opts.Retention),
		PrevToken: cur.Token, Generation: next, History: history})
}

// ReopenOptions configure Guard.Reopen.
type ReopenOptions struct {
	// NewGeneration reopens into the next key generation (Run.Generation):
	// for a failure that was a final answer downstream under the old key.
	NewGeneration bool
	// Eligible, when set, decides whether the record may get a new
	// generation (nil error: yes). Guard.Reopen returns its error wrapped
	// with ErrNotEligible.
	Eligible func(driver.Record) error
	// Operator names who reopened, for the history.
	Operator string
	// PrevToken, when set, reopens only the FAILED record under this token
	// (one the caller read earlier and decided on, e.g. an approved
	// proposal's): a record under any other token — claimed, finished or
	// reopened since — is ErrNotFailed, with the record, nothing written.
	// Default "": the record this call reads.
	PrevToken string
	// Token, when set, is the reopened record's token (e.g. one derived
	// from the approval, so that a resumed run recognises its own reopen);
	// it must be unguessable by others and never reused for another
	// reopen. Default "": a new random token (Options.NewToken).
	Token string
}

// cut shortens s to at most n bytes on a rune boundary, marking a cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n - len("…")
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}

// oneLine folds line breaks, so that one history entry is one line.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

// Get returns the record for key (ErrNotFound when absent or past retention).
func (g *Guard) Get(ctx context.Context, key string) (driver.Record, error) {
	return g.store.Get(ctx, key, g.Now())
}

// randomToken returns 128 random bits as 32 hex characters.
func randomToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Yield ends the lease now while keeping the record IN_PROGRESS with its
// attempt count, so the next delivery reclaims at once (attempt + 1): the
// lease is set to have passed by the skew margin. Use it only after a
// failure that provably had no side effect (the request never left).
func (g *Guard) Yield(ctx context.Context, l Lease) error {
	if l.Key == "" || l.Token == "" {
		return fmt.Errorf("%w: lease without key or token", ErrInvalid)
	}
	now := g.Now()
	return g.store.Extend(ctx, driver.ExtendRequest{Key: l.Key, Token: l.Token, LeaseUntil: now.Add(-g.opts.SkewMargin), Now: now})
}
