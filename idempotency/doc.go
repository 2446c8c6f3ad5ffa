// Package idempotency is the claim/lease/fencing state machine that turns an
// at-least-once stream of work into exactly-once recorded effects.
//
// One Record exists per business key (a charge id, never a transport message
// id). A worker claims the key with one atomic conditional write that succeeds
// only when the key is absent (or past its retention) or is IN_PROGRESS with
// an expired lease. The claim carries a fresh random fencing token; every later
// write by the claimant (Complete, Fail, Extend, Yield) is conditional on
// state = IN_PROGRESS and that token, so a worker whose lease expired and was
// reclaimed by someone else gets ErrLeaseLost and must neither ack nor
// overwrite. A payload fingerprint is stored at claim time: the same key with a
// different payload is a Conflict and is never executed.
//
// The package imports only the standard library. Storage is a port (Store)
// implemented by one package per backend; every implementation must pass the
// conformance suite in package storetest.
package idempotency
