package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// ClaimingReceiver is an optional capability of a queue whose database also
// holds the idempotency records (the SQLite and PostgreSQL queues with their
// own stores): the claim of each message's key is written in the same
// transaction that receives the message, and its result (DONE or FAILED) in
// the one that deletes or dead-letters it (Message.Bound). A wait (WAITING)
// is written in the one that keeps the message but hides it until the
// record is due (WaitVisibility) with its receive count reset to 0: a wait
// never moves a message toward the DLQ, and costs no receive while it
// lasts. The state machine is the store's: the same statements as its
// Claim and Finish.
type ClaimingReceiver interface {
	// ReceiveClaiming is Receive, with a claim for every message p.Claim
	// reads in the receive's own transaction; each such message carries the
	// claim in Message.Bound. A message p.Claim cannot read is received
	// as by Receive (Bound nil).
	ReceiveClaiming(ctx context.Context, max int, p ClaimPolicy) ([]Message, error)
	// Holds reports whether s is the store in this queue's own database:
	// only then may its claims ride in the queue's transactions.
	Holds(s driver.Store) bool
}

// ClaimPolicy is what a ClaimingReceiver needs to know of the messages'
// meaning, from the application.
type ClaimPolicy struct {
	// Claim returns the claim to write for m (the key, the fingerprint, a
	// fresh token and the lease, as idempotency.Guard.ClaimRequest makes
	// them); ok false writes none (a message it cannot read: the handler
	// decides about it as usual). It runs inside the receive's
	// transaction: keep it to parsing.
	// Required, unless Read is set.
	Claim func(m Message) (req driver.ClaimRequest, ok bool)
	// Read, when set, is Claim that also returns what it read of m's body
	// (parsed, opaque to the queue): the receive attaches it to the message
	// it was read from (Message.Parsed), so that the handler does not parse
	// the body again. Set Claim or Read, not both.
	Read func(m Message) (req driver.ClaimRequest, parsed any, ok bool)
	// Settle says what recording a result does to the message: for DONE
	// and FAILED, whether it is dead-lettered (with the reason) rather
	// than deleted. Nil: DONE deletes, FAILED dead-letters with
	// Reason{Code: "failed", Detail: the record's detail}. It is not asked
	// about WAITING: that message is kept (see ClaimingReceiver).
	Settle func(f driver.FinishRequest) (deadLetter bool, r Reason)
}

// Check is what every ReceiveClaiming refuses: a batch outside
// 1–MaxReceive, or a policy without Claim or Read (or with both).
func (p ClaimPolicy) Check(max int) error {
	if max < 1 || max > MaxReceive {
		return fmt.Errorf("receive of %d messages (1-%d)", max, MaxReceive)
	}
	if (p.Claim == nil) == (p.Read == nil) {
		return fmt.Errorf("%w: a claiming receive needs one of ClaimPolicy.Claim and ClaimPolicy.Read", driver.ErrInvalid)
	}
	return nil
}

// Settlement is what p says recording f does to the message.
func (p ClaimPolicy) Settlement(f driver.FinishRequest) (deadLetter bool, r Reason) {
	if p.Settle != nil {
		return p.Settle(f)
	}
	if f.State == driver.StateFailed {
		return true, Reason{Code: "failed", Detail: f.Detail}
	}
	return false, Reason{}
}

// PendingClaim is a claim to write for the message at Index of a receive.
type PendingClaim struct {
	Index int
	Req   driver.ClaimRequest
}

// Claims are the claims p makes for msgs (those it can read, with a
// summary of at most driver.MaxSummaryBytes), in key
// order: the order every claiming transaction writes them in, so that two
// transactions never wait for each other's rows. With Read, each
// message carries what was read of it (Message.Parsed), claimed or not.
func (p ClaimPolicy) Claims(msgs []Message) []PendingClaim {
	var claims []PendingClaim
	for i := range msgs {
		var req driver.ClaimRequest
		var ok bool
		if p.Read != nil {
			var v any
			req, v, ok = p.Read(msgs[i])
			msgs[i].setParsed(v)
		} else {
			req, ok = p.Claim(msgs[i])
		}
		// A summary past driver.MaxSummaryBytes is not written here: the
		// message goes unbound, and the Guard's own claim refuses it
		// (idempotency.ErrInvalid), as it refuses it in DoOptions.
		if ok && req.Key != "" && req.Token != "" && len(req.Summary) <= driver.MaxSummaryBytes {
			claims = append(claims, PendingClaim{i, req})
		}
	}
	slices.SortStableFunc(claims, func(a, b PendingClaim) int { return cmp.Compare(a.Req.Key, b.Req.Key) })
	return claims
}

// SkewMarginOf is the skew margin the claim req was made with: how long
// past a record's LeaseUntil it may be taken (Now − LeaseExpiredBy, at
// least 0).
func SkewMarginOf(req driver.ClaimRequest) time.Duration {
	return max(req.Now.Sub(req.LeaseExpiredBy), 0)
}

// WaitVisibility is how long a message whose record f moves to WAITING
// stays hidden: until a claim made with margin (SkewMarginOf) may resume
// the record, f.NotBefore + margin, counted from f.Now (a duration, so
// that the queue's clock need not agree with the claimant's); never
// negative. A message received again sooner would find the record not
// due and spend a receive on it.
func WaitVisibility(f driver.FinishRequest, margin time.Duration) time.Duration {
	return max(f.NotBefore.Add(margin).Sub(f.Now), 0)
}
