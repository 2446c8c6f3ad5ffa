package driver

// State is where a key is in the claim state machine.
type State string

// The four states of a record, and StateAbsent for a key without one.
const (
	// StateAbsent is no record, or only one past its retention. It is
	// never stored.
	StateAbsent     State = ""
	StateInProgress State = "IN_PROGRESS"
	StateDone       State = "DONE"
	StateFailed     State = "FAILED"
	// StateWaiting: the work ended without a final result and runs again
	// at or after a time (Record.LeaseUntil holds it: the not-before): a
	// declined debit retried on a schedule, a debit waiting out its
	// pre-debit notice's lead. Its Status and Detail say why; its History
	// keeps every attempt's outcome.
	StateWaiting State = "WAITING"
)

// States are the four stored states.
var States = []State{StateInProgress, StateDone, StateFailed, StateWaiting}

// NewCounts is a StateCounter's answer before it counts: every state it
// counts at 0 (a state missing from the map is one the store does not
// count).
func NewCounts() map[State]int {
	m := make(map[State]int, len(States))
	for _, s := range States {
		m[s] = 0
	}
	return m
}

// Valid reports whether s is one of the four stored states.
func (s State) Valid() bool {
	switch s {
	case StateInProgress, StateDone, StateFailed, StateWaiting:
		return true
	}
	return false
}

func (s State) String() string {
	if s == StateAbsent {
		return "absent"
	}
	return string(s)
}

// Op is a write a store performs: one atomic conditional operation.
type Op string

// The writes of the state machine.
const (
	OpClaim    Op = "claim"       // Store.Claim
	OpExtend   Op = "extend"      // Store.Extend (a heartbeat, or a yield: a lease set in the past)
	OpComplete Op = "finish DONE" // Store.Finish to DONE
	OpFail     Op = "finish FAILED"
	OpWait     Op = "finish WAITING" // Store.Finish to WAITING: the work runs again at or after a time
	OpReopen   Op = "reopen"         // Store.Reopen (an operator)
	OpAmend    Op = "amend"          // Amender.Amend (an operator; optional)
	OpCollect  Op = "collect"        // Collector.Collect (an operator records a posting; optional)
)

// Ops are every write of the state machine. A new one is not done until
// it has its rows in Transitions (a write and its refusals; TestEveryOp…),
// its case in the conformance suite (storetest.Transitions fails on an
// operation it has no case for), its place in the linearizability model
// (storetest's modelled ops) and in the whole-protocol simulator
// (protosim's store passes it on).
var Ops = []Op{OpClaim, OpExtend, OpComplete, OpFail, OpWait, OpReopen, OpAmend, OpCollect}

// Condition is what a transition requires of the record and the request,
// beyond its state. Each is evaluated by a request's Allows.
type Condition string

// The conditions of Transitions.
const (
	Always Condition = "always"
	// Live: the record is not past its retention (ExpiresAt > Now).
	Live Condition = "within retention"
	// PastRetention: ExpiresAt <= Now; the record counts as absent.
	PastRetention Condition = "past retention"
	// LeasePassed: LeaseUntil <= Now - skew margin (ClaimRequest.LeaseExpiredBy),
	// same fingerprint.
	LeasePassed Condition = "lease passed by the skew margin, same fingerprint"
	// LeaseLive: LeaseUntil > Now - skew margin, same fingerprint.
	LeaseLive Condition = "lease live, same fingerprint"
	// OtherFingerprint: the lease passed, but the claim's fingerprint differs.
	OtherFingerprint Condition = "lease passed, another fingerprint"
	// OwnToken: the request names the record's token (for Reopen: the
	// token of the record the operator read, or none; for Amend: also the
	// status read).
	OwnToken Condition = "the record's token"
	// OtherToken: the request names another token (a claim taken over, a
	// record finished and claimed again since it was read).
	OtherToken Condition = "another token"
	// OtherStatus: Amend's FromStatus is not the record's status.
	OtherStatus Condition = "another status than read"
	// Due: a WAITING record's not-before (LeaseUntil) is at or before
	// ClaimRequest.LeaseExpiredBy (Now minus the skew margin), same
	// fingerprint.
	Due Condition = "not-before passed by the skew margin, same fingerprint"
	// NotDue: a WAITING record's not-before is ahead, same fingerprint.
	NotDue Condition = "not-before ahead, same fingerprint"
	// OtherGeneration: Collect's Generation is not the record's.
	OtherGeneration Condition = "another generation than read"
	// OtherState: Collect's From is not the record's state.
	OtherState Condition = "another state than read"
	// Collected: a DONE record under Collect's NewToken (the collect
	// landed, its answer was lost).
	Collected Condition = "the collect's new token (it landed)"
)

// Transition is one row of the state machine: from a state, an operation
// under a condition leads to a state. A row whose To is its From and whose
// Writes is false is a refusal: the store changes nothing and answers
// Answer (and Err, when the refusal is an error).
type Transition struct {
	From   State
	Op     Op
	When   Condition
	To     State
	Writes bool
	// Answer is what the store returns, in words.
	Answer string
	// Err is the error the store returns (nil: none).
	Err error
}

// Transitions is the claim state machine, every row of it. Every Store
// implements exactly these rows (the conformance suite runs each one as a
// case); the requests' Allows methods are the same rules in Go. A record's
// Summary is written only by a claim that takes the key
// (ClaimRequest.SummaryOver: the request's, or the record's kept when the
// request has none); every other write keeps it.
//
//	from         op             when                                   to           answer
//	absent       claim          always                                 IN_PROGRESS  acquired, attempt 1, generation 1
//	IN_PROGRESS  claim          past retention                         IN_PROGRESS  acquired as new (attempt 1, no history)
//	DONE         claim          past retention                         IN_PROGRESS  acquired as new
//	FAILED       claim          past retention                         IN_PROGRESS  acquired as new
//	IN_PROGRESS  claim          lease passed by the margin, same fp    IN_PROGRESS  reclaimed: new token, attempt+1, history kept
//	IN_PROGRESS  claim          lease live, same fp                    —            not acquired, the record (busy)
//	IN_PROGRESS  claim          lease passed, another fingerprint      —            not acquired, the record (conflict)
//	DONE         claim          within retention                       —            not acquired, the record (duplicate)
//	FAILED       claim          within retention                       —            not acquired, the record (duplicate)
//	WAITING      claim          past retention                         IN_PROGRESS  acquired as new
//	WAITING      claim          not-before passed by the margin, same  IN_PROGRESS  resumed: new token, attempt+1, generation and history kept
//	WAITING      claim          not-before ahead, same fp              —            not acquired, the record (waiting)
//	WAITING      claim          lease passed, another fingerprint      —            not acquired, the record (conflict)
//	IN_PROGRESS  extend         the record's token                     IN_PROGRESS  lease set
//	IN_PROGRESS  extend         another token                          —            ErrLeaseLost
//	DONE, FAILED extend         the record's token                     —            ErrLeaseLost
//	WAITING      extend         the record's token                     —            ErrLeaseLost
//	absent       extend         always                                 —            ErrLeaseLost
//	IN_PROGRESS  finish DONE    the record's token                     DONE         result and retention set
//	IN_PROGRESS  finish FAILED  the record's token                     FAILED       result and retention set
//	IN_PROGRESS  finish         another token                          —            ErrLeaseLost
//	DONE         finish DONE    the record's token                     —            nil: a retry of a finish that landed
//	FAILED       finish FAILED  the record's token                     —            nil: a retry of a finish that landed
//	DONE         finish FAILED  the record's token                     —            ErrLeaseLost
//	FAILED       finish DONE    the record's token                     —            ErrLeaseLost
//	absent       finish         always                                 —            ErrLeaseLost
//	IN_PROGRESS  finish WAITING the record's token                     WAITING      not-before, result, generation, history and retention set
//	IN_PROGRESS  finish WAITING another token                          —            ErrLeaseLost
//	WAITING      finish WAITING the record's token                     —            nil: a retry of a wait that landed
//	WAITING      finish DONE    the record's token                     —            ErrLeaseLost (claim it first)
//	DONE         finish WAITING the record's token                     —            ErrLeaseLost
//	absent       finish WAITING always                                 —            ErrLeaseLost
//	FAILED       reopen         the record's token (or none given)     IN_PROGRESS  new token, lease passed, reopens+1
//	FAILED       reopen         another token                          —            ErrNotFailed
//	DONE         reopen         always                                 —            ErrNotFailed
//	IN_PROGRESS  reopen         always                                 —            ErrNotFailed
//	WAITING      reopen         always                                 —            ErrNotFailed
//	absent       reopen         always                                 —            ErrNotFound
//	DONE         amend          the record's token and status          DONE         status, detail, history set
//	DONE         amend          another status than read               —            ErrStale
//	FAILED       amend          the record's token                     —            ErrStale
//	WAITING      amend          the record's token                     —            ErrStale
//	absent       amend          always                                 —            ErrNotFound
//	FAILED       collect        the record's token and generation      DONE         new token, posted generation, result, history
//	WAITING      collect        the record's token and generation      DONE         new token, posted generation, result, history
//	IN_PROGRESS  collect        lease passed by the margin, token, gen DONE         new token, posted generation, result, history
//	IN_PROGRESS  collect        lease live                             —            ErrStale (never over a live lease)
//	FAILED       collect        another token                          —            ErrStale
//	WAITING      collect        another token                          —            ErrStale
//	FAILED       collect        another generation than read           —            ErrStale
//	WAITING      collect        another generation than read           —            ErrStale
//	WAITING      collect        another state than read                —            ErrStale
//	DONE         collect        the collect's new token (it landed)    —            nil: the record (a retry of a collect that landed)
//	DONE         collect        the record's token                     —            ErrStale
//	absent       collect        always                                 —            ErrNotFound
var Transitions = []Transition{
	{StateAbsent, OpClaim, Always, StateInProgress, true, "acquired: attempt 1, generation 1", nil},
	{StateInProgress, OpClaim, PastRetention, StateInProgress, true, "acquired as a new record: attempt 1, no history", nil},
	{StateDone, OpClaim, PastRetention, StateInProgress, true, "acquired as a new record", nil},
	{StateFailed, OpClaim, PastRetention, StateInProgress, true, "acquired as a new record", nil},
	{StateInProgress, OpClaim, LeasePassed, StateInProgress, true, "reclaimed: new token, attempt + 1, history kept", nil},
	{StateInProgress, OpClaim, LeaseLive, StateInProgress, false, "not acquired; the record (busy)", nil},
	{StateInProgress, OpClaim, OtherFingerprint, StateInProgress, false, "not acquired; the record (conflict)", nil},
	{StateDone, OpClaim, Live, StateDone, false, "not acquired; the record (a duplicate of a done key)", nil},
	{StateFailed, OpClaim, Live, StateFailed, false, "not acquired; the record (a duplicate of a failed key)", nil},
	{StateWaiting, OpClaim, PastRetention, StateInProgress, true, "acquired as a new record", nil},
	{StateWaiting, OpClaim, Due, StateInProgress, true, "resumed: new token, attempt + 1, generation and history kept; not a reclaim", nil},
	{StateWaiting, OpClaim, NotDue, StateWaiting, false, "not acquired; the record (waiting until its not-before)", nil},
	{StateWaiting, OpClaim, OtherFingerprint, StateWaiting, false, "not acquired; the record (conflict)", nil},

	{StateInProgress, OpExtend, OwnToken, StateInProgress, true, "lease set", nil},
	{StateInProgress, OpExtend, OtherToken, StateInProgress, false, "lease lost", ErrLeaseLost},
	{StateDone, OpExtend, OwnToken, StateDone, false, "lease lost", ErrLeaseLost},
	{StateFailed, OpExtend, OwnToken, StateFailed, false, "lease lost", ErrLeaseLost},
	{StateWaiting, OpExtend, OwnToken, StateWaiting, false, "lease lost", ErrLeaseLost},
	{StateAbsent, OpExtend, Always, StateAbsent, false, "lease lost", ErrLeaseLost},

	{StateInProgress, OpComplete, OwnToken, StateDone, true, "result and retention set", nil},
	{StateInProgress, OpFail, OwnToken, StateFailed, true, "result and retention set", nil},
	{StateInProgress, OpComplete, OtherToken, StateInProgress, false, "lease lost", ErrLeaseLost},
	{StateInProgress, OpFail, OtherToken, StateInProgress, false, "lease lost", ErrLeaseLost},
	{StateDone, OpComplete, OwnToken, StateDone, false, "nil: a retry of a finish that landed", nil},
	{StateFailed, OpFail, OwnToken, StateFailed, false, "nil: a retry of a finish that landed", nil},
	{StateDone, OpFail, OwnToken, StateDone, false, "lease lost", ErrLeaseLost},
	{StateFailed, OpComplete, OwnToken, StateFailed, false, "lease lost", ErrLeaseLost},
	{StateAbsent, OpComplete, Always, StateAbsent, false, "lease lost", ErrLeaseLost},

	{StateInProgress, OpWait, OwnToken, StateWaiting, true, "not-before, result, generation, history and retention set", nil},
	{StateInProgress, OpWait, OtherToken, StateInProgress, false, "lease lost", ErrLeaseLost},
	{StateWaiting, OpWait, OwnToken, StateWaiting, false, "nil: a retry of a wait that landed", nil},
	{StateWaiting, OpComplete, OwnToken, StateWaiting, false, "lease lost (a waiting record is claimed before it is finished)", ErrLeaseLost},
	{StateDone, OpWait, OwnToken, StateDone, false, "lease lost", ErrLeaseLost},
	{StateAbsent, OpWait, Always, StateAbsent, false, "lease lost", ErrLeaseLost},

	{StateFailed, OpReopen, OwnToken, StateInProgress, true, "the reopened record: new token, lease passed, reopens + 1", nil},
	{StateFailed, OpReopen, OtherToken, StateFailed, false, "the record; not failed (a later claim's)", ErrNotFailed},
	{StateDone, OpReopen, Always, StateDone, false, "the record; not failed", ErrNotFailed},
	{StateInProgress, OpReopen, Always, StateInProgress, false, "the record; not failed", ErrNotFailed},
	{StateWaiting, OpReopen, Always, StateWaiting, false, "the record; not failed", ErrNotFailed},
	{StateAbsent, OpReopen, Always, StateAbsent, false, "not found", ErrNotFound},

	{StateDone, OpAmend, OwnToken, StateDone, true, "the amended record", nil},
	{StateDone, OpAmend, OtherStatus, StateDone, false, "the record; stale", ErrStale},
	{StateFailed, OpAmend, OwnToken, StateFailed, false, "the record; stale", ErrStale},
	{StateWaiting, OpAmend, OwnToken, StateWaiting, false, "the record; stale", ErrStale},
	{StateAbsent, OpAmend, Always, StateAbsent, false, "not found", ErrNotFound},

	{StateFailed, OpCollect, OwnToken, StateDone, true, "the collected record: new token, the posted generation, result and history", nil},
	{StateWaiting, OpCollect, OwnToken, StateDone, true, "the collected record: new token, the posted generation, result and history", nil},
	{StateInProgress, OpCollect, LeasePassed, StateDone, true, "the collected record: new token, the posted generation, result and history", nil},
	{StateInProgress, OpCollect, LeaseLive, StateInProgress, false, "the record; stale (a live lease is never collected over)", ErrStale},
	{StateFailed, OpCollect, OtherToken, StateFailed, false, "the record; stale", ErrStale},
	{StateWaiting, OpCollect, OtherToken, StateWaiting, false, "the record; stale", ErrStale},
	{StateFailed, OpCollect, OtherGeneration, StateFailed, false, "the record; stale", ErrStale},
	{StateWaiting, OpCollect, OtherGeneration, StateWaiting, false, "the record; stale", ErrStale},
	{StateWaiting, OpCollect, OtherState, StateWaiting, false, "the record; stale", ErrStale},
	{StateDone, OpCollect, Collected, StateDone, false, "nil: the record (a retry of a collect that landed)", nil},
	{StateDone, OpCollect, OwnToken, StateDone, false, "the record; stale", ErrStale},
	{StateAbsent, OpCollect, Always, StateAbsent, false, "not found", ErrNotFound},
}
