package watermillguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// KeyMetadata is the metadata field the default KeyFunc reads the business
// key from.
const KeyMetadata = "idempotency_key"

// Status is the status the middleware records with DONE; the record's
// detail holds the produced messages (see Options.KeepProduced).
const Status = "WATERMILL_DONE"

// The errors the middleware returns. Those it returns as a *PermanentError
// (IsPermanent) will never succeed on redelivery: route them to a poison
// queue. The others are worth a redelivery: the router nacks the message.
var (
	// ErrMissingKey: the message has no business key (KeyFunc returned "",
	// a blank key or an error). Permanent: a shared "null" key would make unrelated
	// messages duplicates of each other.
	ErrMissingKey = errors.New("watermillguard: message has no idempotency key")
	// ErrConflict: the key was used before with another payload
	// (fingerprint). Permanent.
	ErrConflict = errors.New("watermillguard: key used with another payload")
	// ErrFailedBefore: the key is recorded FAILED by an earlier delivery.
	// Permanent until an operator reopens it (Guard.Reopen).
	ErrFailedBefore = errors.New("watermillguard: key recorded FAILED")
	// ErrInProgress: another delivery holds a live lease on the key (or
	// ours kept it after a handler error that may have had an effect).
	// Retryable.
	ErrInProgress = errors.New("watermillguard: key in progress elsewhere")
	// ErrLeaseLost: the lease was taken over while the handler ran. The
	// new owner finishes; the message is nacked, never acked on a guess.
	// Retryable.
	ErrLeaseLost = errors.New("watermillguard: lease lost while the handler ran")
)

// PermanentError is an error that redelivery cannot fix: a missing key, a
// conflicting payload, a key recorded FAILED, or a handler error marked
// idempotency.ErrPermanent (then recorded FAILED).
type PermanentError struct {
	// Outcome is the guard's outcome (0 for a missing key).
	Outcome idempotency.Outcome
	// Key is the message's business key ("" when missing).
	Key string
	// Err is ErrMissingKey, ErrConflict, ErrFailedBefore or the handler's
	// error.
	Err error
}

func (e *PermanentError) Error() string {
	if e.Key == "" {
		return "permanent: " + e.Err.Error()
	}
	return fmt.Sprintf("permanent: key %q: %s: %v", e.Key, e.Outcome, e.Err)
}

func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err (from a handler wrapped by Middleware) is
// a *PermanentError: the filter for watermill's
// middleware.PoisonQueueWithFilter.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// Options configure Middleware. The zero value takes the defaults.
type Options struct {
	// KeyFunc returns a message's business key (a payment id, an order
	// id: never the transport's message UUID, which a re-publish changes).
	// Default: the metadata field KeyMetadata. An empty or blank key (only
	// white space) or an error is a permanent ErrMissingKey.
	KeyFunc func(*message.Message) (string, error)
	// FingerprintFunc returns what tells a redelivery from another payload
	// under the same key. Default: idempotency.Fingerprint of the payload
	// (SHA-256, hex). Use an idempotency.Fingerprinter where the payload
	// holds a secret.
	FingerprintFunc func(*message.Message) (string, error)
	// RetryDelay is how long the middleware waits before returning a
	// retryable error (in progress elsewhere, store unavailable, a handler
	// error), so that a broker that redelivers at once (AMQP requeue) does
	// not spin. The wait holds the message (as watermill's Retry middleware
	// does).
	//
	// Zero (the default) tracks the lease: a key in progress (elsewhere, or
	// kept by our own handler's error that may have had an effect) waits
	// the guard's RetryAfter in full, until the key can be claimed again,
	// so that the next delivery runs the handler (Reclaimed); with nothing
	// to wait for (the store unavailable, a lease lost, a handler error
	// marked idempotency.ErrNotStarted, whose lease is given up at once) it
	// waits DefaultRetryDelay.
	//
	// Positive: min(RetryAfter, RetryDelay), or RetryDelay when there is no
	// RetryAfter. Mind the broker's delivery limit (RabbitMQ quorum queues'
	// delivery-limit, JetStream MaxDeliver, SQS maxReceiveCount): a key in
	// progress is nacked every RetryDelay, so limit × RetryDelay must
	// exceed the guard's lease plus its skew margin, or the broker drops
	// the message before the key can be claimed again. Negative: no wait
	// (the same rule, with the broker's own redelivery delay).
	RetryDelay time.Duration
	// HeartbeatInterval is how often the lease is extended while the
	// handler runs. Default a third of the guard's lease; an interval of
	// half the lease or more (the lease could run out between two beats,
	// and a redelivery reclaim the key while the handler runs) is capped
	// to a third of it.
	HeartbeatInterval time.Duration
	// KeepProduced stores the messages the handler produced in the DONE
	// record (UUID, metadata, payload; up to driver.MaxDetailBytes as
	// JSON) and returns them again on a duplicate, so that a crash between
	// DONE and the router's publish does not lose them: produced messages
	// are then at-least-once, with the same UUIDs. Without it (the
	// default) a duplicate produces nothing: produced messages are
	// at-most-once. Messages too large to keep are not kept; the record's
	// detail says so.
	KeepProduced bool
	// Do is passed to Guard.Do (FinishTimeout, FinishAttempts). Its
	// Heartbeat, when nil, is the middleware's own.
	Do idempotency.DoOptions
}

// Middleware returns a watermill handler middleware that runs the handler
// at most once per business key through g, and records its result:
//
//   - Acquired, Reclaimed: the handler runs inside Guard.Do with a
//     heartbeat; its produced messages are returned; DONE is recorded
//     before the router publishes them and acks;
//   - DuplicateDone: the handler does not run; nil error (ack), and no
//     produced messages (or the kept ones, with KeepProduced);
//   - DuplicateInProgress, Unfinished (a handler error), LeaseLost, the
//     store unavailable: a retryable error after a wait (RetryDelay; by
//     default until the key can be claimed again), so the router nacks
//     and the broker redelivers;
//   - Conflict, DuplicateFailed, Failed (a handler error marked
//     idempotency.ErrPermanent), a missing key: a *PermanentError
//     (IsPermanent), for a poison queue.
func Middleware(g *idempotency.Guard, opts Options) message.HandlerMiddleware {
	if opts.KeyFunc == nil {
		opts.KeyFunc = metadataKey
	}
	if opts.FingerprintFunc == nil {
		opts.FingerprintFunc = payloadFingerprint
	}
	if opts.HeartbeatInterval <= 0 || opts.HeartbeatInterval >= g.Lease()/2 {
		opts.HeartbeatInterval = max(g.Lease()/3, time.Millisecond)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			return handle(g, opts, h, msg)
		}
	}
}

func metadataKey(msg *message.Message) (string, error) {
	return msg.Metadata.Get(KeyMetadata), nil
}

func payloadFingerprint(msg *message.Message) (string, error) {
	return idempotency.Fingerprint(string(msg.Payload)), nil
}

func handle(g *idempotency.Guard, opts Options, h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	key, err := opts.KeyFunc(msg)
	if err != nil || strings.TrimSpace(key) == "" {
		e := ErrMissingKey
		if err != nil {
			e = fmt.Errorf("%w: %w", ErrMissingKey, err)
		}
		return nil, &PermanentError{Err: e}
	}
	fp, err := opts.FingerprintFunc(msg)
	if err != nil {
		return nil, &PermanentError{Key: key, Err: fmt.Errorf("watermillguard: fingerprint: %w", err)}
	}
	msgCtx := msg.Context()
	do := opts.Do
	if do.Heartbeat == nil {
		do.Heartbeat = &ticker{ctx: context.WithoutCancel(msgCtx), every: opts.HeartbeatInterval}
	}
	var produced []*message.Message
	res, err := g.Do(msgCtx, key, fp, func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
		// The handler sees the guard's context: a lost lease cancels it.
		msg.SetContext(withRun(ctx, run))
		defer msg.SetContext(msgCtx)
		out, err := h(msg)
		if err != nil {
			return idempotency.Done{}, err
		}
		produced = out
		return idempotency.Done{Status: Status, Detail: keep(opts.KeepProduced, out)}, nil
	}, do)
	var notRun *idempotency.NotRunError         // the work did not run: the outcome says why
	if err != nil && !errors.As(err, &notRun) { // the store: nothing decided, or the result not recorded
		wait(msgCtx, opts.RetryDelay, 0)
		return nil, fmt.Errorf("watermillguard: key %q: %w", key, err)
	}
	switch res.Outcome {
	case idempotency.Acquired, idempotency.Reclaimed:
		return produced, nil
	case idempotency.DuplicateDone:
		if !opts.KeepProduced {
			return nil, nil
		}
		return replay(res.Done), nil
	case idempotency.DuplicateInProgress:
		wait(msgCtx, opts.RetryDelay, res.RetryAfter)
		return nil, fmt.Errorf("%w: key %q, retry after %s", ErrInProgress, key, res.RetryAfter.Round(time.Millisecond))
	case idempotency.Unfinished:
		wait(msgCtx, opts.RetryDelay, res.RetryAfter)
		return nil, fmt.Errorf("watermillguard: key %q: handler: %w", key, res.Err)
	case idempotency.LeaseLost:
		wait(msgCtx, opts.RetryDelay, 0)
		return nil, fmt.Errorf("%w: key %q: %w", ErrLeaseLost, key, res.Err)
	case idempotency.Conflict:
		return nil, &PermanentError{Outcome: res.Outcome, Key: key, Err: ErrConflict}
	case idempotency.DuplicateFailed:
		return nil, &PermanentError{Outcome: res.Outcome, Key: key, Err: fmt.Errorf("%w: %s", ErrFailedBefore, res.Record.Detail)}
	case idempotency.Failed:
		return nil, &PermanentError{Outcome: res.Outcome, Key: key, Err: res.Err}
	case idempotency.Waiting:
		// The handler returned an *idempotency.Wait (or an earlier delivery
		// did): the key runs again at NotBefore. The message is held until
		// then (by default; Options.RetryDelay bounds it) and nacked, as a
		// key in progress is: a nack every second would spend the broker's
		// delivery limit long before the time comes.
		wait(msgCtx, opts.RetryDelay, res.RetryAfter)
		return nil, fmt.Errorf("%w: key %q waits until %s", ErrInProgress, key, res.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil, fmt.Errorf("watermillguard: key %q: unexpected outcome %s", key, res.Outcome)
}

// DefaultRetryDelay is the wait before a retryable error with nothing to
// wait for, when Options.RetryDelay is zero.
const DefaultRetryDelay = time.Second

// wait sleeps for the delay before a retryable error (see
// Options.RetryDelay), or until ctx ends.
func wait(ctx context.Context, delay, retryAfter time.Duration) {
	var d time.Duration
	switch {
	case delay < 0:
		return
	case delay == 0 && retryAfter > 0:
		d = retryAfter // the key can be claimed again then
	case delay == 0:
		d = DefaultRetryDelay
	case retryAfter > 0 && retryAfter < delay:
		d = retryAfter
	default:
		d = delay
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type runKey struct{}

func withRun(ctx context.Context, run idempotency.Run) context.Context {
	return context.WithValue(ctx, runKey{}, run)
}

// RunFrom returns the guard's Run for the message being handled (from
// msg.Context() inside the handler): Run.Reclaimed says an earlier
// delivery held the key and did not finish, so its effect may have
// happened (ask downstream before doing it again); Run.Generation
// belongs in a downstream idempotency key.
func RunFrom(ctx context.Context) (idempotency.Run, bool) {
	run, ok := ctx.Value(runKey{}).(idempotency.Run)
	return run, ok
}

// kept is the JSON of produced messages in a DONE record's detail.
type kept struct {
	Messages []keptMessage `json:"m"`
	Dropped  int           `json:"dropped,omitempty"`
}

type keptMessage struct {
	UUID     string            `json:"u"`
	Metadata map[string]string `json:"md,omitempty"`
	Payload  []byte            `json:"p,omitempty"`
}

func keep(on bool, out []*message.Message) string {
	if !on || len(out) == 0 {
		return ""
	}
	k := kept{}
	for _, m := range out {
		k.Messages = append(k.Messages, keptMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload})
	}
	b, err := json.Marshal(k)
	if err != nil || len(b) > driver.MaxDetailBytes {
		b, _ = json.Marshal(kept{Dropped: len(out)})
	}
	return string(b)
}

func replay(d idempotency.Done) []*message.Message {
	if d.Status != Status || d.Detail == "" {
		return nil
	}
	var k kept
	if json.Unmarshal([]byte(d.Detail), &k) != nil {
		return nil
	}
	out := make([]*message.Message, 0, len(k.Messages))
	for _, km := range k.Messages {
		m := message.NewMessage(km.UUID, km.Payload)
		for name, v := range km.Metadata {
			m.Metadata.Set(name, v)
		}
		out = append(out, m)
	}
	return out
}

// PoisonQueue is watermill's middleware.PoisonQueueWithFilter(pub, topic,
// IsPermanent) with the topic made to exist first: a poisoned message is
// acked only after it is published where it stays until read. It calls
// init.SubscribeInitialize(topic) on the broker's subscriber: on RabbitMQ
// (watermill-amqp) that declares the topic's queue and binds it, where a
// publish to an exchange or routing key with no queue behind it is acked
// into nothing; on NATS JetStream it creates the stream. init is the
// subscriber of the same broker and configuration that will read the
// poison topic; a nil init, or a topic it cannot set up, is an error, so
// that a deployment never starts with a poison topic that swallows
// messages.
func PoisonQueue(pub message.Publisher, init message.SubscribeInitializer, topic string) (message.HandlerMiddleware, error) {
	if pub == nil || init == nil {
		return nil, errors.New("watermillguard: PoisonQueue needs the publisher and the subscriber (its SubscribeInitialize sets the topic up)")
	}
	if err := init.SubscribeInitialize(topic); err != nil {
		return nil, fmt.Errorf("watermillguard: set up the poison topic %q: %w", topic, err)
	}
	return middleware.PoisonQueueWithFilter(pub, topic, IsPermanent)
}
