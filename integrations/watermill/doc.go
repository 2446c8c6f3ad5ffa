// Package watermillguard is a watermill handler middleware backed by an
// idempotency.Guard: a durable deduplicator for any broker watermill
// speaks (RabbitMQ, NATS JetStream, Kafka, SQS, …), where watermill's own
// Deduplicator keeps keys in memory for a time window.
//
// It is a module of its own (integrations/watermill), so that the core
// module does not depend on watermill.
//
//	guard, _ := idempotency.NewGuard(store, idempotency.Options{})
//	poison, _ := watermillguard.PoisonQueue(pub, sub, "poison") // the topic set up first
//	router.AddMiddleware(poison, watermillguard.Middleware(guard, watermillguard.Options{}))
//
// # The key
//
// The key is the message's business key (a payment id), never the
// transport's message UUID, which a re-publish changes. By default it is the
// metadata field "idempotency_key" (KeyMetadata); Options.KeyFunc reads it
// from elsewhere. A message without a key fails permanently with
// ErrMissingKey: an empty or blank key is never shared between messages. The
// fingerprint (default: SHA-256 of the payload) tells a redelivery from
// another payload under the same key (Conflict).
//
// # Outcomes
//
// Acquired or Reclaimed: the handler runs inside Guard.Do while a heartbeat
// extends the lease (every third of it), so the lease does not lapse while
// the handler runs; DONE is recorded when it returns. A duplicate of a DONE
// key is acknowledged without running the handler. A key in progress
// elsewhere, a handler error, a lost lease and an unreachable store return a
// retryable error after a wait (Options.RetryDelay; by default, for a key
// in progress, until the key can be claimed again, so that a broker's
// delivery limit is not spent on nacks while the lease runs): watermill
// nacks and the broker redelivers later. A conflicting payload, a key recorded
// FAILED, a handler error marked idempotency.ErrPermanent and a missing key
// return a *PermanentError: pair the middleware with PoisonQueue(pub, sub,
// topic) (watermill's PoisonQueueWithFilter with IsPermanent, the topic set
// up on the broker first), added before (outside) this one, so that those
// go to a poison topic and are acked instead of being redelivered for ever.
//
// A handler error that is not permanent may have had an effect: the guard
// keeps the lease until it runs out; by default the middleware holds the
// message until then, and the next delivery runs the handler again,
// Reclaimed. Mark an error that provably had no effect with
// idempotency.ErrNotStarted to give the lease up at once. Inside the
// handler, RunFrom(msg.Context()) says whether the key was reclaimed from a
// delivery that did not finish (its effect may have happened: ask
// downstream first).
//
// # What exactly-once means here
//
// The handler's effect happens once per key, however often the broker
// delivers the message and however many copies were published, as long as
// the effect either is done by the time the handler returns or is itself
// keyed by the business key downstream (a consumer killed inside the effect
// leaves a lease that expires; the next delivery runs Reclaimed and must be
// able to tell whether the effect happened). DONE is recorded before the
// router publishes the produced messages and acks: produced messages are
// at-most-once by default (a crash between DONE and the publish loses
// them), and at-least-once with Options.KeepProduced, which keeps them in
// the record (up to 4 KiB of JSON) and returns them again, with the same
// UUIDs, on a duplicate; deduplicate them downstream by key as well.
//
// See docs/library/watermill.md.
package watermillguard
