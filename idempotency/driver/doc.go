// Package driver is the contract between package idempotency and a storage
// backend: what a store implements, not what an application calls. An
// application meets only the record a Guard returns (Record, with its
// State: StateInProgress, StateDone, StateFailed) and the errors, which
// package idempotency re-exports.
//
// A backend implements Store — one atomic conditional write per method — and
// any of the optional capabilities (StuckLister, Purger, StateCounter,
// Amender, Collector, ResultLister) it can serve. The rules every write enforces are
// one table, Transitions, with a predicate per request (ClaimRequest.Allows,
// FinishRequest.Allows, ExtendRequest.Allows, ReopenRequest.Allows,
// AmendRequest.Allows, CollectRequest.Allows) that a store evaluating in Go calls and that a store
// writing a condition in its own language (SQL, a DynamoDB condition
// expression, a Lua script) must mean. Every backend passes the conformance
// suite in package idempotency/storetest, which runs each row of
// Transitions as a case.
//
// Backends in this module: memstore (in memory, the reference), sqlite,
// postgres, redisstore and awsdynamodb.
//
// The package imports only the standard library.
package driver
