package idempotency

import (
	"context"
	"time"
)

// Store is the storage port of the state machine. Every method is one atomic
// conditional operation in the backing store. Implementations must pass
// storetest.Run.
type Store interface {
	// Claim writes a new IN_PROGRESS record for req.Key, atomically, iff
	//   - no record exists for the key, or
	//   - the existing record is past its retention (ExpiresAt <= req.Now), or
	//   - the existing record is IN_PROGRESS, its lease has passed by the
	//     skew margin (LeaseUntil <= req.LeaseExpiredBy) and its Fingerprint
	//     equals req.Fingerprint.
	// A fresh claim has Attempt 1; a reclaim has the old Attempt + 1 and keeps
	// CreatedAt. Status and Detail are cleared.
	//
	// When the condition fails, Claim returns Acquired=false and the existing
	// record, read in the same round trip where the backend can.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)

	// Get returns the record for key, or ErrNotFound (also for a record past
	// its retention at now).
	Get(ctx context.Context, key string, now time.Time) (Record, error)

	// Finish moves an IN_PROGRESS record held by t.Token to t.State (DONE or
	// FAILED) with t.Status and t.Detail, and sets ExpiresAt. A record
	// already in t.State under t.Token is a retry of a Finish that landed (an
	// SDK retry after a lost answer): Finish returns nil for it. If the
	// record is missing, holds another token, or is in another state, it
	// returns ErrLeaseLost and changes nothing.
	Finish(ctx context.Context, t Finish) error

	// Extend sets LeaseUntil of an IN_PROGRESS record held by token. Same
	// condition and error as Finish.
	Extend(ctx context.Context, key, token string, leaseUntil, now time.Time) error

	// Reopen turns a FAILED record back into one the next delivery claims
	// at once: state IN_PROGRESS under r.Token (a token nobody holds) with
	// LeaseUntil r.LeaseUntil (already passed), Status and Detail moved to PrevStatus and
	// PrevDetail, Reopens + 1, ReopenedAt and ReopenReason set, ExpiresAt
	// renewed, Generation and History set from r when r.Generation > 0;
	// Attempt, Fingerprint and CreatedAt kept. It is one conditional write
	// on state FAILED (and, when r.PrevToken is set, on that token: the
	// very record the caller read): it returns ErrNotFound for a missing
	// record (or one past retention) and ErrNotFailed, with the record,
	// for any other state or token. It returns the reopened record.
	Reopen(ctx context.Context, r Reopen) (Record, error)
}

// Reopen is an operator's request to reopen a FAILED record.
type Reopen struct {
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

// ClaimRequest is the record a claimant wants to write.
type ClaimRequest struct {
	Key         string
	Token       string
	Fingerprint string
	Now         time.Time
	// LeaseExpiredBy: an IN_PROGRESS record whose LeaseUntil is at or before
	// it may be reclaimed. The Guard sets it to Now minus the skew margin,
	// so that a claimant whose clock runs ahead of the owner's cannot take
	// a live lease.
	LeaseExpiredBy time.Time
	LeaseUntil     time.Time
	ExpiresAt      time.Time
}

// Allows reports whether req may take the key over from r: r is past its
// retention, or IN_PROGRESS with its lease passed by LeaseExpiredBy and the
// same fingerprint. It is the condition every Store's Claim writes
// atomically, for stores that evaluate it in Go (and for a store that must
// tell a lost race from a duplicate).
func (req ClaimRequest) Allows(r Record) bool {
	return r.Expired(req.Now) ||
		(r.State == StateInProgress && !req.LeaseExpiredBy.Before(r.LeaseUntil) && r.Fingerprint == req.Fingerprint)
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

// Finish is a conditional transition to a final state.
type Finish struct {
	Key       string
	Token     string
	State     State // DONE or FAILED
	Status    string
	Detail    string
	Now       time.Time
	ExpiresAt time.Time
	// Claimed is the record as this lease's claim left it, when the Guard
	// has it (nil for a lease built by hand). Within one claim only the
	// lease moves, so a store may write the finished record whole from it,
	// conditioned on the token (DynamoDB does: a PutItem instead of an
	// UpdateItem); stores that update in place ignore it.
	Claimed *Record
}

// StuckLister is an optional Store capability for operators: the
// IN_PROGRESS records whose lease passed at or before now (their worker
// died or hangs), oldest lease first, at most limit, plus how many there are
// in all. Records past retention are not listed.
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
// records are in each state (records past retention not counted), where
// the store can count without reading every record.
type StateCounter interface {
	CountByState(ctx context.Context, now time.Time) (map[State]int, error)
}

// Amend is an operator's change of a DONE record's result (a missed
// notification sent later: DEBITED_NOTIFICATION_FAILED → DEBITED). It
// applies only to the very record read: state DONE, Token and FromStatus
// as given.
type Amend struct {
	Key, Token, FromStatus string
	Status, Detail         string
	History                []string // replaces the record's
	Now                    time.Time
}

// Amender is an optional Store capability: Amend changes Status, Detail,
// History and UpdatedAt of a DONE record with a.Token and a.FromStatus,
// in one conditional write, and returns the record written. A missing
// record (or one past retention) is ErrNotFound; any other record is
// ErrStale, with the record, and nothing changes.
type Amender interface {
	Amend(ctx context.Context, a Amend) (Record, error)
}

// ResultLister is an optional Store capability for operators: the live
// records in state with Status status, oldest update first, at most limit.
// Stores without an index on the status scan (an operator's tool, not a
// hot path).
type ResultLister interface {
	ListByResult(ctx context.Context, state State, status string, now time.Time, limit int) ([]Record, error)
}
