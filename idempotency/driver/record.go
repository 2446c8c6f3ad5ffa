package driver

import (
	"fmt"
	"strings"
	"time"
)

// Record is the one item kept per business key.
type Record struct {
	Key   string
	State State
	// LeaseUntil is when the current claim expires. An IN_PROGRESS record
	// whose lease has passed may be reclaimed.
	LeaseUntil time.Time
	// Token is random per claim (the fencing token).
	Token string
	// Attempt is 1 on the first claim and grows by one on every reclaim.
	Attempt int
	// Fingerprint identifies the business payload (a keyed hash of it).
	Fingerprint string
	// Summary is what the caller keeps with the record to check its effect
	// later against an outside ledger and to show it (for a charge: the
	// amount in minor units, the currency and the account's last four). It
	// is not secret and not a fingerprint: written in clear by the claim
	// that takes the key (ClaimRequest.Summary; a claim without one keeps
	// the record's), kept by every other write, at most MaxSummaryBytes.
	// "" on a record written before summaries existed.
	Summary string
	// Status and Detail are the application's result, written with the final
	// state: for charges DEBITED / DEBITED_NOTIFICATION_FAILED / FAILED and a
	// reason or core-banking reference.
	Status string
	Detail string
	// CreatedAt is the time of the first claim; UpdatedAt of the last write.
	CreatedAt time.Time
	UpdatedAt time.Time
	// ExpiresAt is the retention deadline; past it the record counts as
	// absent (a DynamoDB TTL attribute deletes it some time later).
	ExpiresAt time.Time
	// The audit trail of operator reopenings of a FAILED record: how many
	// there were, and the last one's time, reason and the status and detail
	// the record held before it. Claims and finishes keep these fields; a
	// record taken over past its retention starts without.
	Reopens      int
	ReopenedAt   time.Time
	ReopenReason string
	PrevStatus   string
	PrevDetail   string
	// Generation counts the key generations of the work's side effect: 1
	// for the first, one more for every reopening into a new generation, for
	// work whose downstream system has given a final answer under the old
	// one (a bank's decline under an idempotency key is final for that
	// key). Claims and finishes keep it; a record taken over past its
	// retention starts at 1. A store reads a record written before
	// generations existed as 1.
	Generation int
	// History holds one line per reopening, oldest first: the generation,
	// the outcome it ended with, when, why. With the current Status and
	// Detail it is every generation's outcome.
	History []string
}

// MaxDetailBytes bounds a record's Status and Detail and each History
// line that the Guard writes (it cuts them on a rune boundary): whatever
// the work returns, a record stays far below every store's item limit
// (DynamoDB's 400 KB), so that it can always be finished.
const MaxDetailBytes = 4096

// MaxSummaryBytes bounds a record's Summary (the Guard refuses a longer
// one before it claims).
const MaxSummaryBytes = 256

// UnsummarisedNote is what a store's migration says when it adds Summary
// to n records kept before it existed: they keep none.
func UnsummarisedNote(n int) string {
	return fmt.Sprintf("%d record(s) kept before summaries carry none (the amount is only in their keyed fingerprint): "+
		"a reconciliation checks a posting against them by its narrative or a kept notice, else matches them by key only and lists them, until they pass retention", n)
}

// MaxResultBytes bounds the Detail of a DONE record that holds a typed
// result (idempotency.DoTyped: the encoded first result, handed back to
// every duplicate). Every store holds a Detail of this size (the
// conformance suite writes and reads one): 256 KiB stays under DynamoDB's
// 400 KB item limit with the record's other attributes (each bounded by
// MaxDetailBytes; a DONE record is never reopened, so its History does not
// grow). Larger results are refused before they are written
// (idempotency.ErrResultTooLarge).
const MaxResultBytes = 256 << 10

// LeaseLive reports whether r is IN_PROGRESS with a lease that has not passed
// at now.
func (r Record) LeaseLive(now time.Time) bool {
	return r.State == StateInProgress && now.Before(r.LeaseUntil)
}

// Expired reports whether r is past its retention at now.
func (r Record) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// JoinHistory is a record's History as one text (one line per entry), for
// stores that keep it in a text column; SplitHistory is its inverse.
func JoinHistory(h []string) string { return strings.Join(h, "\n") }

// SplitHistory reads what JoinHistory wrote ("" is no history).
func SplitHistory(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
