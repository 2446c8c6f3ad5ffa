// Package idempotency turns an at-least-once stream of work into
// exactly-once recorded effects: a Guard claims a business key (a charge id,
// never a transport message id) before the work runs and records its result
// after, so a second delivery of the same work finds the record instead of
// running again. Every outcome of Guard.Do, handled:
//
//	res, err := guard.Do(ctx, key, fingerprint, work, idempotency.DoOptions{})
//	var notRun *idempotency.NotRunError // the work did not run, and no stored result came back
//	switch {
//	case errors.Is(err, idempotency.ErrConflict), errors.Is(err, idempotency.ErrAlreadyFailed):
//		return deadLetter(err) // another payload, or failed for good before: never runs as sent
//	case errors.As(err, &notRun): // ErrInProgress, ErrWaiting: not finished elsewhere yet
//		return retryAfter(notRun.RetryAfter)
//	case err != nil: // the store was unreachable (nothing decided), or the result unrecorded
//		return retryLater(err) // do not ack: the message comes back
//	case res.Outcome == idempotency.Failed: // the work ran and failed for good (FAILED)
//		return deadLetter(res.Err)
//	case !res.Outcome.Owned() && res.Outcome != idempotency.DuplicateDone: // Unfinished, LeaseLost, Waiting
//		return retryAfter(res.RetryAfter) // ran, not to its end: do not ack
//	}
//	return ack(res.Done) // Acquired, Reclaimed (ran now) or DuplicateDone (before): the one result
//
// Guard.Do claims the key, runs the function while a heartbeat extends the
// lease, and records DONE or FAILED. Every way a claim can end is in
// DoResult.Outcome (Outcome's doc says what each asks of the caller); the
// outcomes where the work did not run and no stored result came back are
// also an error, a *NotRunError (errors.Is: ErrInProgress, ErrConflict,
// ErrAlreadyFailed, ErrWaiting), as Powertools raises them. Otherwise Do
// returns an error only when the store could not be reached, a result
// could not be recorded, or the options are wrong (ErrInvalid). A work's
// error keeps the key to the end of its lease (the effect may have
// happened); wrap it with ErrNotStarted to give the key back at once.
//
// DoTyped is Do for work that returns a value of any type: the first
// run's value is encoded (encoding/json unless DoOptions.Codec says
// otherwise), stored whole with DONE (up to driver.MaxResultBytes, 256 KiB;
// a larger one is refused with ErrResultTooLarge, and the key is still
// recorded DONE so that the work never runs twice), and handed back decoded
// to every duplicate with TypedResult.Replayed set. DoOptions.Namespace
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
