package driver

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
)

// Store is the storage port of the state machine. Every method is one atomic
// conditional operation in the backing store, implementing the rows of
// Transitions for its operation. Implementations pass storetest.Run.
type Store interface {
	// Claim writes a new IN_PROGRESS record for req.Key, atomically, iff
	// there is none or req.Allows the one there is. A fresh claim (no
	// record, or one past retention) has Attempt 1 and Generation 1; a
	// reclaim (of an IN_PROGRESS record) and a resume (of a WAITING one
	// that is due) have the old Attempt + 1 and keep CreatedAt, the reopen
	// audit fields, Generation and History. Status and Detail are cleared.
	// Only a reclaim is Reclaimed: a WAITING record's work ended cleanly.
	//
	// When the condition fails, Claim returns Acquired=false and the existing
	// record, read in the same round trip where the backend can.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)

	// Get returns the record for key, or ErrNotFound (also for a record past
	// its retention at now).
	Get(ctx context.Context, key string, now time.Time) (Record, error)

	// Finish moves the record to req.State (DONE, FAILED or WAITING) with
	// req.Status and req.Detail, and sets ExpiresAt, iff req.Allows it; to
	// WAITING it also sets LeaseUntil to req.NotBefore. Generation and
	// History are replaced by req's when req.Generation > 0 and
	// req.History is not nil (each on its own). A record
	// req.Landed on is a retry of a Finish that landed (an SDK retry after
	// a lost answer): Finish returns nil for it. Otherwise it returns
	// ErrLeaseLost and changes nothing.
	Finish(ctx context.Context, req FinishRequest) error

	// Extend sets LeaseUntil iff req.Allows the record; otherwise it returns
	// ErrLeaseLost and changes nothing.
	Extend(ctx context.Context, req ExtendRequest) error

	// Reopen turns a FAILED record back into one the next delivery claims
	// at once, iff req.Allows it: state IN_PROGRESS under req.Token (a
	// token nobody holds) with LeaseUntil req.LeaseUntil (already passed),
	// Status and Detail moved to PrevStatus and PrevDetail, Reopens + 1,
	// ReopenedAt and ReopenReason set, ExpiresAt renewed, Generation and
	// History set from req when req.Generation > 0; Attempt, Fingerprint
	// and CreatedAt kept. It returns ErrNotFound for a missing record (or
	// one past retention) and ErrNotFailed, with the record, when req does
	// not allow it. It returns the reopened record.
	Reopen(ctx context.Context, req ReopenRequest) (Record, error)
}

// ClaimRequest is the record a claimant wants to write.
type ClaimRequest struct {
	Key         string
	Token       string
	Fingerprint string
	// Summary, when not "", is written as the record's Summary; "" keeps
	// the record's (none on a new record).
	Summary string
	Now     time.Time
	// LeaseExpiredBy: an IN_PROGRESS record whose LeaseUntil is at or before
	// it may be reclaimed. The Guard sets it to Now minus the skew margin,
	// so that a claimant whose clock runs ahead of the owner's cannot take
	// a live lease.
	LeaseExpiredBy time.Time
	LeaseUntil     time.Time
	ExpiresAt      time.Time
}

// Allows reports whether req may take the key over from r: r is past its
// retention, or IN_PROGRESS with its lease passed by LeaseExpiredBy, or
// WAITING with its not-before (LeaseUntil) passed by LeaseExpiredBy, with
// the same fingerprint (the claim rows of Transitions). It is the
// condition every Store's Claim writes atomically.
func (req ClaimRequest) Allows(r Record) bool {
	return r.Expired(req.Now) ||
		((r.State == StateInProgress || r.State == StateWaiting) && !req.LeaseExpiredBy.Before(r.LeaseUntil) && r.Fingerprint == req.Fingerprint)
}

// Carries reports whether a claim req.Allows on r keeps r's attempt count,
// CreatedAt, reopen audit fields, Generation and History (a reclaim or a
// resume), rather than starting a new record (r past retention).
func (req ClaimRequest) Carries(r Record) bool { return !r.Expired(req.Now) }

// SummaryOver is the Summary a claim req.Allows on r writes: req's, or,
// when req carries none, r's when the claim Carries it.
func (req ClaimRequest) SummaryOver(r Record) string {
	if req.Summary != "" || !req.Carries(r) {
		return req.Summary
	}
	return r.Summary
}

// Reclaims reports whether a claim req.Allows on r takes over an
// IN_PROGRESS claim whose work may have had its effect
// (ClaimResult.Reclaimed).
func (req ClaimRequest) Reclaims(r Record) bool {
	return !r.Expired(req.Now) && r.State == StateInProgress
}

// ClaimResult is what a Claim did.
type ClaimResult struct {
	// Acquired: the record is now ours (Record is the record written).
	Acquired bool
	// Reclaimed: Acquired by taking over an expired IN_PROGRESS claim.
	Reclaimed bool
	// Record is ours when Acquired, else the existing record.
	Record Record
}

// FinishRequest is a conditional transition to a final state, or to
// WAITING.
type FinishRequest struct {
	Key       string
	Token     string
	State     State // DONE, FAILED or WAITING
	Status    string
	Detail    string
	Now       time.Time
	ExpiresAt time.Time
	// NotBefore is when a WAITING record may be claimed again (written as
	// LeaseUntil); ignored for the other states.
	NotBefore time.Time
	// Generation, when > 0, replaces the record's (a retry under a new key
	// generation).
	Generation int
	// History, when not nil, replaces the record's (one more attempt's
	// outcome).
	History []string
	// Claimed is the record as this lease's claim left it, when the Guard
	// has it (nil for a lease built by hand). Within one claim only the
	// lease moves, so a store may write the finished record whole from it,
	// conditioned on the token (DynamoDB does: a PutItem instead of an
	// UpdateItem); stores that update in place ignore it.
	Claimed *Record
}

// Valid reports whether req's state is one Finish writes, with what it
// needs (a WAITING record needs its not-before).
func (req FinishRequest) Valid() bool {
	switch req.State {
	case StateDone, StateFailed:
		return true
	case StateWaiting:
		return !req.NotBefore.IsZero()
	}
	return false
}

// Allows reports whether req may finish r: IN_PROGRESS under req.Token.
func (req FinishRequest) Allows(r Record) bool {
	return r.State == StateInProgress && r.Token == req.Token
}

// Landed reports whether r is what req would have written: already in
// req.State under req.Token (the finish landed and its answer was lost).
func (req FinishRequest) Landed(r Record) bool {
	return r.State == req.State && r.Token == req.Token
}

// ExtendRequest sets the lease of a held claim: a heartbeat, or a yield (a
// LeaseUntil already passed).
type ExtendRequest struct {
	Key        string
	Token      string
	LeaseUntil time.Time
	Now        time.Time
}

// Allows reports whether req may extend r: IN_PROGRESS under req.Token.
func (req ExtendRequest) Allows(r Record) bool {
	return r.State == StateInProgress && r.Token == req.Token
}

// ReopenRequest is an operator's request to reopen a FAILED record.
type ReopenRequest struct {
	Key        string
	Token      string
	Reason     string
	Now        time.Time
	LeaseUntil time.Time // passed by the skew margin: reclaimable at once
	ExpiresAt  time.Time
	// PrevToken, when set, is the token of the FAILED record the caller
	// read and decided on.
	PrevToken string
	// Generation and History, when Generation > 0, replace the record's.
	Generation int
	History    []string
}

// Allows reports whether req may reopen r (a record within retention):
// FAILED, and the very record read when PrevToken is set.
func (req ReopenRequest) Allows(r Record) bool {
	return r.State == StateFailed && (req.PrevToken == "" || r.Token == req.PrevToken)
}

// AmendRequest is an operator's change of a DONE record's result (a missed
// notification sent later: DEBITED_NOTIFICATION_FAILED → DEBITED). It
// applies only to the very record read: state DONE, Token and FromStatus
// as given.
type AmendRequest struct {
	Key, Token, FromStatus string
	Status, Detail         string
	History                []string // replaces the record's
	Now                    time.Time
}

// Allows reports whether req may amend r (a record within retention).
func (req AmendRequest) Allows(r Record) bool {
	return r.State == StateDone && r.Token == req.Token && r.Status == req.FromStatus
}

// Amender is an optional Store capability: Amend changes Status, Detail,
// History and UpdatedAt of a record req.Allows, in one conditional write,
// and returns the record written. A missing record (or one past retention)
// is ErrNotFound; any other record is ErrStale, with the record, and
// nothing changes.
type Amender interface {
	Amend(ctx context.Context, req AmendRequest) (Record, error)
}

// CollectRequest is an operator's recording of a posting the bank made
// (reconciliation: a declined generation posted after all, a debit whose
// consumer died before it recorded it): the very record read — its state,
// token and generation — becomes DONE in one conditional write, under a
// token nobody holds, at the generation the bank posted. No lease is taken
// or given up: a delivery meanwhile either finds the record as read (and
// the collect lands first, or is refused) or finds it DONE.
type CollectRequest struct {
	Key string
	// From is the state read: FAILED, WAITING, or IN_PROGRESS (then its
	// lease must have passed by LeaseExpiredBy: never over a live lease).
	From State
	// Token is the token of the record read (required).
	Token string
	// Generation is the generation read (0 counts as 1).
	Generation int
	// LeaseExpiredBy, for From IN_PROGRESS only: the record's LeaseUntil
	// must be at or before it (Now minus the skew margin).
	LeaseExpiredBy time.Time
	// NewToken is written: a token nobody holds (required).
	NewToken string
	// PostedGeneration is the generation the bank posted, written as the
	// record's Generation, so that the record names the bank key collected
	// (1 or more).
	PostedGeneration int
	Status, Detail   string
	// History replaces the record's.
	History        []string
	Now, ExpiresAt time.Time
}

// Valid reports whether req names what a collect needs: a key, the token
// read, a new token, a state it may collect from, a posted generation.
func (req CollectRequest) Valid() bool {
	switch req.From {
	case StateFailed, StateWaiting, StateInProgress:
	default:
		return false
	}
	// The generation posted is the one read or an earlier one (a declined
	// generation the bank booked after all), never one not yet presented.
	return req.Key != "" && req.Token != "" && req.NewToken != "" && req.PostedGeneration >= 1 && req.PostedGeneration <= max(req.Generation, 1)
}

// Allows reports whether req may collect r (a record within retention): r
// is in req.From (FAILED, WAITING or IN_PROGRESS) under req.Token at
// req.Generation, and, when IN_PROGRESS, its lease passed by
// req.LeaseExpiredBy.
func (req CollectRequest) Allows(r Record) bool {
	switch req.From {
	case StateFailed, StateWaiting, StateInProgress:
	default:
		return false
	}
	return req.Token != "" && r.State == req.From && r.Token == req.Token && max(r.Generation, 1) == max(req.Generation, 1) &&
		(req.From != StateInProgress || !req.LeaseExpiredBy.Before(r.LeaseUntil))
}

// Landed reports whether r is what req wrote: DONE under req.NewToken (a
// retried collect whose answer was lost): Collect answers it as success.
func (req CollectRequest) Landed(r Record) bool {
	return req.NewToken != "" && r.State == StateDone && r.Token == req.NewToken
}

// Collector is an optional Store capability: Collect writes, in one
// conditional write iff req.Allows the record, state DONE with req's
// Status, Detail and History, Generation req.PostedGeneration, Token
// req.NewToken, UpdatedAt req.Now and ExpiresAt req.ExpiresAt, keeping
// Attempt, Fingerprint, CreatedAt and the reopen audit fields, and returns
// the record written. A record req.Landed on is returned as written (nil
// error). A missing record (or one past retention) is ErrNotFound; any
// other record is ErrStale, with the record, and nothing changes. A
// request that is not Valid is ErrInvalid.
type Collector interface {
	Collect(ctx context.Context, req CollectRequest) (Record, error)
}

// InternalKeyPrefix begins the keys of the tools' own claims (a notice
// being sent again: "_renotify/…"), never a charge's: a charge id starts
// with a letter or a digit. Stuck does not list them — a tool's claim
// left behind is not a charge stuck mid-debit; the tool takes it over.
const InternalKeyPrefix = "_"

// StuckLister is an optional Store capability for operators: the
// IN_PROGRESS records whose lease passed at or before now (their worker
// died or hangs), oldest lease first, at most limit, plus how many there are
// in all. Records past retention are not listed, nor those whose key
// starts with InternalKeyPrefix.
type StuckLister interface {
	Stuck(ctx context.Context, now time.Time, limit int) ([]Record, int, error)
}

// Purger is an optional Store capability, for stores that do not delete
// records past retention themselves (DynamoDB does, by TTL). A record past
// its retention already counts as absent; purging only frees the space.
type Purger interface {
	// Purge deletes up to limit records whose ExpiresAt is at or before now
	// and returns how many it deleted.
	Purge(ctx context.Context, now time.Time, limit int) (int, error)
	// Expired counts the records whose ExpiresAt is at or before now.
	Expired(ctx context.Context, now time.Time) (int, error)
}

// StateCounter is an optional Store capability for operators: how many
// records are in each state (records past retention not counted, nor a
// tool's own, whose key starts with InternalKeyPrefix), where
// the store can count without reading every record. Every state it counts
// is in the map, 0 included (NewCounts); a state missing from the map is
// not counted (DynamoDB counts only the states of its sparse index: DONE
// would be a scan).
type StateCounter interface {
	CountByState(ctx context.Context, now time.Time) (map[State]int, error)
}

// ResultLister is an optional Store capability for operators: the live
// records in state with Status status, oldest update first, at most limit.
// Stores without an index on the status scan (an operator's tool, not a
// hot path).
type ResultLister interface {
	ListByResult(ctx context.Context, state State, status string, now time.Time, limit int) ([]Record, error)
}

// Bound is a claim made in the transaction of another write to the store's
// database — the receive of the queue message the claim is for, where the
// queue and the records share one database (SQLite, PostgreSQL) — and the
// way to record the claim's result in the transaction that settles that
// message. A queue.Message from such a queue carries one (Message.Bound);
// the Guard uses it instead of a Claim and a Finish of their own, so that a
// charge costs about the queue's own commits. The claim and the finish are
// the store's own (the same statements as its Claim and Finish, on the rows
// of Transitions): only the transactions they ride in differ.
type Bound interface {
	// Claimed returns the claim made when the message was received — the
	// request written and the store's result — the first time it is
	// called; ok is false after that, or when no claim was made (a message
	// the claim policy could not read).
	Claimed() (req ClaimRequest, res ClaimResult, ok bool)
	// Finish is Store.Finish, with its answers, in one transaction with the
	// message's settlement: deleted for DONE, dead-lettered for FAILED (as
	// the queue's claim policy says), for WAITING kept but hidden until the
	// record is due, its receive count reset to 0 (queue.ClaimingReceiver).
	// A refused finish (ErrLeaseLost)
	// leaves the message as it was; a finish that landed on a message
	// delivered again since (a stale receipt) is recorded, and the message
	// is left to that delivery.
	Finish(ctx context.Context, req FinishRequest) error
	// Settled reports whether the message was deleted, dead-lettered or
	// (WAITING) hidden in the transaction of its result: there is nothing
	// left to acknowledge.
	Settled() bool
	// Release gives up a claim the receive acquired and nobody took (the
	// message is handed back unhandled, at shutdown): its lease is set to
	// have passed, as Guard.Yield does, so that the next delivery reclaims
	// at once instead of waiting the lease out. A claim taken, or not
	// acquired, is left alone; Claimed answers false after it.
	Release(ctx context.Context) error
}

// ClaimedAtReceive is the part of a Bound that is the same for every
// store: the claim made when the message was received, handed out once
// (Claimed), given up when the message goes back unhandled (Release,
// through the store's Extend), and whether the message was settled. A
// store's Bound embeds it and adds its Finish.
type ClaimedAtReceive struct {
	store          Store
	req            ClaimRequest
	res            ClaimResult
	taken, settled atomic.Bool
}

// NewClaimedAtReceive is the claim req made at receive, with the store's
// result res; store is what Release extends the lease through.
func NewClaimedAtReceive(store Store, req ClaimRequest, res ClaimResult) *ClaimedAtReceive {
	return &ClaimedAtReceive{store: store, req: req, res: res}
}

// Claimed implements Bound.
func (c *ClaimedAtReceive) Claimed() (ClaimRequest, ClaimResult, bool) {
	if c.taken.Swap(true) {
		return ClaimRequest{}, ClaimResult{}, false
	}
	return c.req, c.res, true
}

// Settled implements Bound.
func (c *ClaimedAtReceive) Settled() bool { return c.settled.Load() }

// SetSettled records that the message went with its result.
func (c *ClaimedAtReceive) SetSettled() { c.settled.Store(true) }

// Release implements Bound: the store's Extend (Guard.Yield's write) to a
// lease that passed by the claim's own skew margin (LeaseExpiredBy), so
// that any later claimant may take it.
func (c *ClaimedAtReceive) Release(ctx context.Context) error {
	if c.taken.Swap(true) || !c.res.Acquired {
		return nil
	}
	err := c.store.Extend(ctx, ExtendRequest{Key: c.req.Key, Token: c.req.Token, LeaseUntil: c.req.LeaseExpiredBy, Now: c.req.Now})
	if errors.Is(err, ErrLeaseLost) {
		return nil // taken over or finished meanwhile: nothing to give up
	}
	return err
}

// ListRequest asks a StateLister for one page of the live records in a
// state, in key order.
type ListRequest struct {
	State State
	// Status, when set, keeps only the records with that Status (DONE
	// with DEBITED_NOTIFICATION_FAILED: a missed notice).
	Status string
	// Prefix keeps only the keys that begin with it, byte for byte: no
	// character in it is a pattern ("%", "_", "*" are themselves).
	Prefix string
	// After is the cursor: only keys greater than it (the last key of
	// the page before; "" from the start).
	After string
	// Limit caps the page (1 to MaxListLimit; a larger one is
	// MaxListLimit).
	Limit int
	Now   time.Time
}

// MaxListLimit caps a page of ListState.
const MaxListLimit = 500

// ListPage is one page of ListState: at most Limit records, keys
// ascending. Next is the cursor of the next page (the last key listed),
// "" when there is none. A record that stays in the state while the pages
// are read is listed exactly once (the pages are by key, not by position:
// a record leaving the state or joining it moves no other record between
// pages); one that leaves it is not listed after it left, one that joins
// it is listed when its key is still ahead of the cursor.
type ListPage struct {
	Records []Record
	Next    string
}

// StateLister is an optional Store capability for operators: the records
// in a state (with a status), a page at a time, by key, searched by key
// prefix. Records past retention are not listed. A store that can list
// only some states without a full scan answers ErrNotIndexed for the
// others (DynamoDB: its sparse index holds IN_PROGRESS, FAILED and the
// results it was told to keep, see its package).
type StateLister interface {
	ListState(ctx context.Context, req ListRequest) (ListPage, error)
}

// PageLimit is req.Limit within 1 and MaxListLimit (0: 50).
func (req ListRequest) PageLimit() int {
	if req.Limit <= 0 {
		return 50
	}
	return min(req.Limit, MaxListLimit)
}

// PrefixEnd is the least string greater than every string that begins
// with prefix, in byte order (which for UTF-8 is code-point order): the
// exclusive upper bound of a key-range search by prefix, so that no store
// reads a prefix as a pattern. It is valid UTF-8 when prefix is. ok is
// false when there is no bound (prefix "" or only U+10FFFF).
func PrefixEnd(prefix string) (end string, ok bool) {
	rs := []rune(prefix)
	for len(rs) > 0 {
		last := rs[len(rs)-1]
		rs = rs[:len(rs)-1]
		switch {
		case last == unicode.MaxRune:
			continue
		case last == 0xD7FF:
			return string(append(rs, 0xE000)), true // past the surrogates
		}
		return string(append(rs, last+1)), true
	}
	return "", false
}

// Listed reports whether r belongs on a page of req: in the state (and
// status), the prefix, after the cursor, within retention. Stores that
// filter in Go use it; the others say the same in their query.
func (req ListRequest) Listed(r Record) bool {
	return r.State == req.State && (req.Status == "" || r.Status == req.Status) && strings.HasPrefix(r.Key, req.Prefix) &&
		r.Key > req.After && !r.Expired(req.Now)
}

// Page is the page of recs (sorted by key, at most limit+1 of them, all
// listed): the first limit, and the cursor when there are more.
func Page(recs []Record, limit int) ListPage {
	if len(recs) <= limit {
		return ListPage{Records: recs}
	}
	return ListPage{Records: recs[:limit], Next: recs[limit-1].Key}
}

// WalkRequest asks an UpdatedWalker for the live records in a state whose
// UpdatedAt is in [From, To).
type WalkRequest struct {
	State    State
	From, To time.Time
	Now      time.Time
}

// Walked reports whether r belongs to req's walk: in the state, updated
// within [From, To), within retention, and not a tool's own record
// (InternalKeyPrefix).
func (req WalkRequest) Walked(r Record) bool {
	return r.State == req.State && !r.UpdatedAt.Before(req.From) && r.UpdatedAt.Before(req.To) && !r.Expired(req.Now) &&
		!strings.HasPrefix(r.Key, InternalKeyPrefix)
}

// UpdatedWalker is an optional Store capability for reconciliation: fn is
// called once for every record req.Walked, in no particular order; an
// error from fn stops the walk and is returned. A store that lists every
// state by key (StateLister) need not have it: reconciliation pages
// through ListState instead. DynamoDB, whose index holds only some states,
// walks with a Scan (a daily batch's read of the table).
type UpdatedWalker interface {
	WalkUpdated(ctx context.Context, req WalkRequest, fn func(Record) error) error
}

// Walk calls fn for every record of s that req.Walked: through the store's
// own UpdatedWalker where it has one, else through StateLister's pages
// (every state listed by key), filtered. A store with neither, or whose
// listing does not hold req.State, answers ErrNotIndexed.
func Walk(ctx context.Context, s Store, req WalkRequest, fn func(Record) error) error {
	if w, ok := s.(UpdatedWalker); ok {
		return w.WalkUpdated(ctx, req, fn)
	}
	l, ok := s.(StateLister)
	if !ok {
		return ErrNotIndexed
	}
	for after := ""; ; {
		page, err := l.ListState(ctx, ListRequest{State: req.State, After: after, Limit: MaxListLimit, Now: req.Now})
		if err != nil {
			return err
		}
		for _, r := range page.Records {
			if req.Walked(r) {
				if err := fn(r); err != nil {
					return err
				}
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}
