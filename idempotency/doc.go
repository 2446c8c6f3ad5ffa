// Package idempotency turns an at-least-once stream of work into
// exactly-once recorded effects: a Guard claims a business key (a charge id,
// never a transport message id) before the work runs and records its result
// after, so a second delivery of the same work finds the record instead of
// running again.
//
// Most callers need Guard.Do: it claims the key, runs the function while a
// heartbeat extends the lease, and records DONE or FAILED. Every way a claim
// can end is returned as data in DoResult.Outcome, the way net/http's
// Client.Do returns a 404 as a response: Acquired and Reclaimed (the work
// ran), DuplicateDone and DuplicateFailed (it ran before; the stored result
// is in DoResult.Record), DuplicateInProgress (another worker holds a live
// lease; retry after DoResult.RetryAfter), Conflict (the key was used with another
// payload; never run), Failed (the work failed permanently), Unfinished (a
// retryable failure; the lease is yielded) and LeaseLost (the lease was
// taken over while the work ran; neither acknowledge nor overwrite). Do
// returns an error only when the store could not be reached or a result
// could not be recorded.
//
// DoTyped is Do for work that returns a value of any type: the first
// run's value is encoded (encoding/json unless TypedOptions.Codec says
// otherwise), stored whole with DONE (up to driver.MaxResultBytes, 256 KiB;
// a larger one is refused with ErrResultTooLarge, and the key is still
// recorded DONE so that the work never runs twice), and handed back decoded
// to every duplicate with TypedResult.Replayed set. TypedOptions.Namespace
// keeps callers that share a store apart. Package idemhttp builds the
// Idempotency-Key middleware for net/http on it.
//
// Claim, Extend, Complete, Fail and Yield are the same steps one at a time,
// for callers that run the work themselves; Reopen lets an operator hand a
// FAILED record back to the next delivery (optionally as a new generation). A Fingerprinter keys the
// payload fingerprint with HMAC-SHA-256 so the same key with another
// payload is told apart from a redelivery.
//
// The record a Guard returns (driver.Record), its states
// (driver.StateInProgress, driver.StateDone, driver.StateFailed; a key
// without a record is absent) and every transition between them are in
// package idempotency/driver: the table driver.Transitions, and the
// contract a store implements.
// Stores: memstore (tests and the demo), sqlite, postgres, redisstore and
// awsdynamodb; each passes the conformance suite in idempotency/storetest,
// which runs every row of the table against it.
//
// The package imports only the standard library and its driver package.
package idempotency
