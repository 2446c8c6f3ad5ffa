package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// MaxVisibility is SQS's ceiling on a visibility timeout.
const MaxVisibility = queue.MaxVisibility

// Options configure a Runtime. Zero fields take the documented defaults.
type Options struct {
	// Concurrency is the most messages handled at once. Default 16.
	Concurrency int
	// Receivers is how many receives may be under way at once, sharing
	// the Concurrency slots (1-16). Default 1. More help where a receive
	// takes long beside the handling: a queue that claims in its receive's
	// transaction (a commit per receive), or a distant queue.
	Receivers int
	// BatchSize is the most messages asked for per Receive (1-10). Default
	// 10. The runtime asks for as many as it has free handler slots, so no
	// received message waits for a slot.
	BatchSize int
	// BatchFillWait is how long the receiver, once one slot is free, waits
	// for more to free up before asking, so that a busy runtime receives
	// full batches. Default 10ms.
	BatchFillWait time.Duration
	// VisibilityTimeout is the queue's visibility timeout; each heartbeat
	// extends an in-flight message by this much. Default 30s.
	VisibilityTimeout time.Duration
	// HeartbeatInterval is how often in-flight messages are kept alive
	// (visibility extended, registered beats run). Default
	// VisibilityTimeout/3. Must be shorter than VisibilityTimeout.
	HeartbeatInterval time.Duration
	// ShutdownTimeout is how long in-flight handlers may run after Run's
	// context is cancelled before their contexts are cancelled. Default 30s.
	ShutdownTimeout time.Duration
	// AckBatchSize (1-10, default 10) and AckFlushInterval (default 100ms)
	// control delete batching: a batch is sent when full or when its oldest
	// ack has waited the interval.
	AckBatchSize     int
	AckFlushInterval time.Duration
	// Backoff gives the delay before a retried message is seen again when
	// the handler did not say (Decision.RetryAfter == 0). Default
	// ExponentialBackoff(time.Second, 15*time.Minute).
	Backoff func(receiveCount int) time.Duration
	// OpTimeout bounds each ack, visibility change and dead-letter call.
	// Default 10s.
	OpTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnDecision, when set, is called after each message's decision has been
	// applied, with the time the handler took (for metrics and tests).
	OnDecision func(m Message, d Decision, took time.Duration)
	// Gate, when set, is waited on before every receive: while a dependency
	// is down (an open circuit breaker) the runtime receives nothing, so
	// that no message's receive count grows and nothing is dead-lettered by
	// the queue's redrive policy during an outage. While the dependency is
	// on trial the runtime hands over one message at a time and waits for
	// its decision. A message the handler retries while the gate is paused
	// is kept in hand (parked: its visibility extended by the heartbeat)
	// and handled again from memory when it is due and the gate lets it
	// through, so that an outage costs a message at most one receive (a
	// Wait is never parked). Use Gates to combine several.
	Gate Gate
	// MaxParked bounds the messages kept in hand while the gate is paused;
	// past it a retried message returns to the queue as usual, and a trial
	// reuses a parked message instead of receiving a new one. Default
	// 4 × Concurrency.
	MaxParked int
	// MaxVisibility is the longest the runtime makes a message invisible
	// at once, counted from its receive: a retry's delay and each stretch
	// of a Wait. Default MaxVisibility (SQS's 12 hours; tests shorten it).
	MaxVisibility time.Duration
}

// Gate holds receiving back while a dependency is down (circuit.Breaker).
type Gate interface {
	// Wait blocks while receiving must pause. It returns trial == false
	// when receiving may go on as usual, and trial == true when the
	// dependency is on trial: the runtime hands over exactly one message
	// and waits for its decision before it asks again.
	Wait(ctx context.Context) (trial bool, err error)
	// Paused reports whether the dependency is not known to work now (open
	// or on trial): a message retried then is parked, not handed back.
	Paused() bool
}

// Shutter is a Gate that can also tell, without blocking, that receiving
// must not go on now (a posting window that has closed). A receive
// long-polls, so one begun before the gate shut can return messages after
// it: while Shut reports true they are handed back unhandled (visible
// again at once, a claim made in the receive given up), to be received
// when the gate opens.
type Shutter interface {
	Shut() bool
}

// Gates combines gates: receiving goes on when every gate lets it, on
// trial when any gate is on trial; paused when any is paused; shut when
// any is shut (Shutter).
func Gates(gs ...Gate) Gate {
	var out gates
	for _, g := range gs {
		if g != nil {
			out = append(out, g)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}

type gates []Gate

func (gs gates) Wait(ctx context.Context) (bool, error) {
	trial := false
	for _, g := range gs {
		t, err := g.Wait(ctx)
		if err != nil {
			return false, err
		}
		trial = trial || t
	}
	// A gate waited on earlier may have shut meanwhile: then what is
	// received is parked (Paused), and the next Wait blocks.
	return trial, nil
}

func (gs gates) Shut() bool {
	for _, g := range gs {
		if s, ok := g.(Shutter); ok && s.Shut() {
			return true
		}
	}
	return false
}

// shut reports whether the gate is a Shutter that is shut now.
func (r *Runtime) shut() bool {
	s, ok := r.opts.Gate.(Shutter)
	return ok && s.Shut()
}

func (gs gates) Paused() bool {
	for _, g := range gs {
		if g.Paused() {
			return true
		}
	}
	return false
}

// ExponentialBackoff returns min(base·2^(n-1), max) for receive count n.
func ExponentialBackoff(base, max time.Duration) func(int) time.Duration {
	return func(n int) time.Duration {
		d := base
		for i := 1; i < n && d < max; i++ {
			d *= 2
		}
		return min(d, max)
	}
}

func (o *Options) setDefaults() error {
	if o.Concurrency < 0 || o.BatchSize < 0 || o.BatchSize > 10 || o.AckBatchSize < 0 || o.AckBatchSize > 10 || o.Receivers < 0 || o.Receivers > 16 {
		return errors.New("consumer: Concurrency must be positive, BatchSize and AckBatchSize 1-10, Receivers 1-16")
	}
	if o.Receivers == 0 {
		o.Receivers = 1
	}
	if o.VisibilityTimeout < 0 || o.HeartbeatInterval < 0 || o.BatchFillWait < 0 || o.ShutdownTimeout < 0 || o.AckFlushInterval < 0 || o.OpTimeout < 0 {
		return errors.New("consumer: durations must not be negative")
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.BatchSize == 0 {
		o.BatchSize = 10
	}
	if o.BatchFillWait == 0 {
		o.BatchFillWait = 10 * time.Millisecond
	}
	if o.VisibilityTimeout == 0 {
		o.VisibilityTimeout = 30 * time.Second
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = o.VisibilityTimeout / 3
	}
	if o.HeartbeatInterval >= o.VisibilityTimeout {
		return fmt.Errorf("consumer: HeartbeatInterval %s must be shorter than VisibilityTimeout %s", o.HeartbeatInterval, o.VisibilityTimeout)
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.AckBatchSize == 0 {
		o.AckBatchSize = 10
	}
	if o.AckFlushInterval == 0 {
		o.AckFlushInterval = 100 * time.Millisecond
	}
	if o.Backoff == nil {
		o.Backoff = ExponentialBackoff(time.Second, 15*time.Minute)
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxParked < 0 {
		return errors.New("consumer: MaxParked must not be negative")
	}
	if o.MaxParked == 0 {
		o.MaxParked = 4 * o.Concurrency
	}
	if o.MaxVisibility < 0 || o.MaxVisibility > MaxVisibility {
		return fmt.Errorf("consumer: MaxVisibility %s outside 0-%s", o.MaxVisibility, MaxVisibility)
	}
	if o.MaxVisibility == 0 {
		o.MaxVisibility = MaxVisibility
	}
	return nil
}

// Runtime consumes one Source with one Handler.
type Runtime struct {
	src    Source
	sender Sender // src's, when it can send (requeue of a Wait)
	h      Handler
	opts   Options
	stats  counters
	lot    *lot
}

// New checks opts and returns a Runtime.
func New(src Source, h Handler, opts Options) (*Runtime, error) {
	if src == nil || h == nil {
		return nil, errors.New("consumer: New needs a Source and a Handler")
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	sender, _ := src.(Sender)
	return &Runtime{src: src, sender: sender, h: h, opts: opts, lot: newLot(opts.MaxParked)}, nil
}

// Stats are the runtime's running totals.
type Stats struct {
	Received, Acked, Retried, DeadLettered, Released int64
	AckErrors, ReceiveErrors, Heartbeats, Panics     int64
	InFlight                                         int64
	// Parked counts the retries kept in hand while the gate was paused;
	// Unparked the parked messages handled again without a receive;
	// InHand is how many are parked now.
	Parked, Unparked, InHand int64
	// Waited counts the waits applied (a handler's Wait, or a message
	// whose not-before was still to come); Requeued the ones applied by
	// sending a copy and deleting the original.
	Waited, Requeued int64
}

type counters struct {
	received, acked, retried, deadLettered, released atomic.Int64
	ackErrors, receiveErrors, heartbeats, panics     atomic.Int64
	inFlight, parked, unparked                       atomic.Int64
	waited, requeued                                 atomic.Int64
}

// Stats returns a snapshot of the totals.
func (r *Runtime) Stats() Stats {
	c := &r.stats
	return Stats{
		Received: c.received.Load(), Acked: c.acked.Load(), Retried: c.retried.Load(),
		DeadLettered: c.deadLettered.Load(), Released: c.released.Load(),
		AckErrors: c.ackErrors.Load(), ReceiveErrors: c.receiveErrors.Load(),
		Heartbeats: c.heartbeats.Load(), Panics: c.panics.Load(), InFlight: c.inFlight.Load(),
		Parked: c.parked.Load(), Unparked: c.unparked.Load(), InHand: int64(r.lot.len()),
		Waited: c.waited.Load(), Requeued: c.requeued.Load(),
	}
}

// Run consumes until ctx is cancelled, then shuts down gracefully: it stops
// receiving, lets in-flight handlers finish for up to ShutdownTimeout, then
// cancels the ones still running and waits for them, sends every pending
// ack, and returns. A message whose handler has not returned a decision is
// never acked: it stays on the queue and is delivered again. Run returns nil
// after a shutdown.
func (r *Runtime) Run(ctx context.Context) error {
	// Handlers run on work, which outlives ctx by up to ShutdownTimeout.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	acks := newAcker(r)
	ackerDone := make(chan struct{})
	go func() { defer close(ackerDone); acks.run(work) }()

	slots := make(chan struct{}, r.opts.Concurrency)
	var handlers, loops sync.WaitGroup
	for i := range r.opts.Receivers {
		loops.Go(func() { r.receiveLoop(ctx, work, slots, &handlers, acks, i == 0) })
	}
	loops.Wait()

	// Shutdown: no more receives. Give handlers ShutdownTimeout, then cancel.
	finished := make(chan struct{})
	go func() { handlers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(r.opts.ShutdownTimeout):
		r.opts.Logger.Warn("shutdown timeout: cancelling in-flight handlers; their messages will be redelivered",
			"in_flight", r.stats.inFlight.Load())
		cancelWork()
		<-finished
	}
	r.handBack(r.lot.takeAll())
	acks.close()
	<-ackerDone
	return nil
}

// receiveLoop receives and dispatches until ctx ends. Receivers run one
// each, sharing the handler slots; only the leader hands messages over
// while the gate is on trial (one at a time) and unparks: the others wait
// for the trial to end.
func (r *Runtime) receiveLoop(ctx, work context.Context, slots chan struct{}, handlers *sync.WaitGroup, acks *acker, leader bool) {
	want := min(r.opts.BatchSize, r.opts.Concurrency)
	failures := 0
	for ctx.Err() == nil {
		if r.opts.Gate != nil {
			trial, err := r.opts.Gate.Wait(ctx)
			if err != nil {
				break // ctx ended
			}
			if trial {
				if !leader {
					sleep(ctx, trialWait)
					continue
				}
				if !r.trial(ctx, work, slots, handlers, acks) {
					failures++
					sleep(ctx, receiveBackoff(failures))
				} else {
					failures = 0
				}
				continue
			}
			if leader {
				r.unparkDue(ctx, work, slots, handlers, acks)
			}
		}
		got := r.takeSlots(ctx, slots, want)
		if ctx.Err() != nil {
			releaseSlots(slots, got)
			break
		}
		if r.opts.Gate != nil {
			// It may have shut while we waited for a slot.
			trial, err := r.opts.Gate.Wait(ctx)
			if err != nil || trial {
				releaseSlots(slots, got)
				continue
			}
		}
		asked := time.Now()
		msgs, err := r.src.Receive(ctx, got)
		if err != nil {
			releaseSlots(slots, got)
			if ctx.Err() != nil {
				break
			}
			r.stats.receiveErrors.Add(1)
			failures++
			delay := receiveBackoff(failures)
			r.opts.Logger.Warn("receive failed; backing off", "error", err, "backoff", delay)
			sleep(ctx, delay)
			continue
		}
		failures = 0
		r.stats.received.Add(int64(len(msgs)))
		if ctx.Err() != nil {
			// Received while shutting down: hand them straight back.
			r.release(msgs)
			releaseSlots(slots, got)
			break
		}
		if len(msgs) > 0 && r.shut() {
			// The gate shut while the receive long-polled: hand them
			// back, to be received when it opens.
			r.release(msgs)
			releaseSlots(slots, got)
			continue
		}
		releaseSlots(slots, got-len(msgs))
		for _, m := range msgs {
			r.dispatch(work, &Delivery{Message: m, received: asked}, slots, handlers, acks, nil)
		}
	}
}

// trialWait is how often a receiver that is not the leader looks whether
// a trial has ended.
const trialWait = 20 * time.Millisecond

// dispatch runs the handler on d in its own goroutine; it holds one slot,
// taken by the caller, until the handler's decision has been applied.
// done, when set, is closed then.
func (r *Runtime) dispatch(work context.Context, d *Delivery, slots chan struct{}, handlers *sync.WaitGroup, acks *acker, done chan struct{}) {
	handlers.Add(1)
	r.stats.inFlight.Add(1)
	go func() {
		defer func() {
			<-slots
			r.stats.inFlight.Add(-1)
			handlers.Done()
			if done != nil {
				close(done)
			}
		}()
		r.handle(work, d, acks)
	}()
}

// trial hands exactly one message to a handler while the gate is on trial,
// and waits for its decision: a parked message that is due, else one newly
// received (none while the parking lot is full: then it waits for a parked
// one to fall due). It reports false after a failed receive.
func (r *Runtime) trial(ctx, work context.Context, slots chan struct{}, handlers *sync.WaitGroup, acks *acker) bool {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return true
	}
	d := r.lot.takeDue(time.Now())
	if d != nil {
		r.stats.unparked.Add(1)
	} else {
		if r.lot.full() {
			<-slots
			r.lot.waitDue(ctx)
			return true
		}
		asked := time.Now()
		msgs, err := r.src.Receive(ctx, 1)
		if err != nil || len(msgs) == 0 {
			<-slots
			if err != nil && ctx.Err() == nil {
				r.stats.receiveErrors.Add(1)
				r.opts.Logger.Warn("receive failed; backing off", "error", err)
				return false
			}
			return true
		}
		r.stats.received.Add(int64(len(msgs)))
		if r.shut() {
			r.release(msgs)
			<-slots
			return true
		}
		d = &Delivery{Message: msgs[0], received: asked}
	}
	done := make(chan struct{})
	r.dispatch(work, d, slots, handlers, acks, done)
	select {
	case <-done:
	case <-ctx.Done():
	}
	return true
}

// unparkDue hands every parked message that is due to a handler again,
// without a new receive (the gate lets work through).
func (r *Runtime) unparkDue(ctx, work context.Context, slots chan struct{}, handlers *sync.WaitGroup, acks *acker) {
	for r.lot.hasDue(time.Now()) {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		d := r.lot.takeDue(time.Now())
		if d == nil {
			<-slots
			return
		}
		r.stats.unparked.Add(1)
		r.dispatch(work, d, slots, handlers, acks, nil)
	}
}

// park keeps d in hand until due (its visibility extended on every
// heartbeat) instead of handing it back to the queue. It reports false
// when the lot is full.
func (r *Runtime) park(work context.Context, d *Delivery, due time.Time) bool {
	p := &parked{d: d, due: due, stop: make(chan struct{}), stopped: make(chan struct{})}
	if !r.lot.add(p) {
		return false
	}
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(r.opts.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-work.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(work, r.opts.OpTimeout)
			err := r.src.ChangeVisibility(ctx, d.Message, r.opts.VisibilityTimeout)
			cancel()
			switch {
			case errors.Is(err, queue.ErrStaleReceipt):
				// It was delivered again (its visibility lapsed, or SQS's
				// 12-hour cap passed): that delivery is the one to handle.
				if r.lot.remove(p) {
					r.opts.Logger.Warn("a parked message was delivered again; letting go of this copy",
						"message_id", d.ID, "error", err)
				}
				return
			case err != nil:
				// The queue is unreachable too (a database that holds both):
				// keep it and try again on the next beat.
				r.opts.Logger.Warn("heartbeat: could not extend a parked message's visibility", "message_id", d.ID, "error", err)
			}
			r.stats.heartbeats.Add(1)
		}
	}()
	return true
}

// handBack returns parked messages to the queue, each visible again when it
// would have been due (shutdown).
func (r *Runtime) handBack(ps []*parked) {
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.OpTimeout)
		delay := min(max(time.Until(p.due), 0), r.opts.MaxVisibility)
		if err := r.src.ChangeVisibility(ctx, p.d.Message, delay); err != nil {
			r.opts.Logger.Warn("could not hand a parked message back; it returns after its visibility timeout",
				"message_id", p.d.ID, "error", err)
		}
		cancel()
		r.stats.released.Add(1)
	}
}

// takeSlots waits for one free handler slot, then for up to BatchFillWait
// takes more, up to want: a busy runtime asks for full batches, and a slow
// message in flight never stops the others from being received.
func (r *Runtime) takeSlots(ctx context.Context, slots chan struct{}, want int) int {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	got := 1
	if got == want {
		return got
	}
	fill := time.NewTimer(r.opts.BatchFillWait)
	defer fill.Stop()
	for got < want {
		select {
		case slots <- struct{}{}:
			got++
		case <-fill.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// receiveBackoff is the wait after the n-th failed receive in a row:
// 100 ms doubling up to 5 s.
func receiveBackoff(n int) time.Duration {
	return min(time.Duration(1<<min(n, 6))*50*time.Millisecond, 5*time.Second)
}

func releaseSlots(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// release makes unhandled messages visible again at once.
func (r *Runtime) release(msgs []Message) {
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.OpTimeout)
		if m.Bound != nil {
			// A claim made in the receive: give its lease up too, or the
			// next delivery would wait it out.
			if err := m.Bound.Release(ctx); err != nil {
				r.opts.Logger.Warn("could not give up the claim of an unhandled message; its next delivery waits for the lease",
					"message_id", m.ID, "error", err)
			}
		}
		if err := r.src.ChangeVisibility(ctx, m, 0); err != nil {
			r.opts.Logger.Warn("could not release an unhandled message; it returns after its visibility timeout",
				"message_id", m.ID, "error", err)
		}
		cancel()
		r.stats.released.Add(1)
	}
}

func (r *Runtime) handle(work context.Context, d *Delivery, acks *acker) {
	m := d.Message
	if until, ok := r.notBefore(m); ok {
		// Requeued to wait, and not due yet: wait again without the
		// handler (no store request while a charge waits).
		dec := Decision{Action: Wait, Until: until, Reason: queue.Reason{Code: CodeNotBefore}}
		r.wait(work, d, until)
		if r.opts.OnDecision != nil {
			r.opts.OnDecision(m, dec, 0)
		}
		return
	}
	stopBeat := r.heartbeat(work, d)
	start := time.Now()
	dec := r.safeHandle(work, d)
	took := time.Since(start)
	stopBeat()

	switch {
	case m.Bound != nil && m.Bound.Settled():
		// Deleted, dead-lettered or rescheduled already, in the
		// transaction that recorded its result (a claim made in the
		// receive's transaction): nothing is left to send.
		switch dec.Action {
		case DeadLetter:
			r.stats.deadLettered.Add(1)
		case Wait:
			r.stats.waited.Add(1)
		default:
			r.stats.acked.Add(1)
		}
	case dec.Action == Ack:
		acks.add(m)
	case dec.Action == DeadLetter:
		ctx, cancel := r.opCtx(work)
		err := r.src.DeadLetter(ctx, m, dec.Reason)
		cancel()
		if err != nil {
			r.opts.Logger.Error("dead-letter failed; the message stays on the queue and will be redelivered",
				"message_id", m.ID, "reason", dec.Reason.String(), "error", err)
		} else {
			r.stats.deadLettered.Add(1)
		}
	case dec.Action == Wait && !dec.Until.IsZero():
		// Never parked: a wait is not a retry, and the gate has nothing
		// to do with when it ends.
		r.wait(work, d, dec.Until)
	default: // Retry, and anything unknown: never ack.
		switch dec.Action {
		case Retry:
		case Wait:
			r.opts.Logger.Error("handler returned Wait without Until; retrying the message",
				"message_id", m.ID, "reason", dec.Reason.String())
			dec = Decision{Action: Retry, Reason: queue.Reason{Code: "wait_without_until", Detail: dec.Reason.String()}}
		default:
			r.opts.Logger.Error("handler returned an unknown action; leaving the message for redelivery",
				"message_id", m.ID, "action", dec.Action)
			dec = Decision{Action: Retry, Reason: queue.Reason{Code: "unknown_action"}}
		}
		delay := dec.RetryAfter
		if delay <= 0 {
			delay = r.opts.Backoff(m.ReceiveCount)
		}
		delay = min(max(delay, 0), r.opts.MaxVisibility)
		r.stats.retried.Add(1)
		if r.opts.Gate != nil && r.opts.Gate.Paused() && work.Err() == nil && r.park(work, d, time.Now().Add(delay)) {
			r.stats.parked.Add(1)
			break
		}
		ctx, cancel := r.opCtx(work)
		if err := r.src.ChangeVisibility(ctx, m, delay); err != nil {
			r.opts.Logger.Warn("could not set the retry delay; the message returns after its visibility timeout",
				"message_id", m.ID, "error", err)
		}
		cancel()
	}
	if r.opts.OnDecision != nil {
		r.opts.OnDecision(m, dec, took)
	}
}

// opCtx bounds one queue call that applies a decision: quick, and not to
// be cut short by shutdown.
func (r *Runtime) opCtx(work context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(work), r.opts.OpTimeout)
}

// CodeNotBefore is the reason of the Wait the runtime applies itself to a
// message whose queue.NotBeforeAttribute is still to come (OnDecision).
const CodeNotBefore queue.Code = "not_before"

// MaxNotBeforeAhead is the furthest ahead a not-before attribute is
// believed: one further (or one that does not parse) is ignored with a
// warning, and the message handed to the handler, whose claim decides.
const MaxNotBeforeAhead = 400 * 24 * time.Hour

// notBefore is m's not-before attribute when it is still to come. A
// message carrying a claim made at its receive (Bound) is handed over
// whatever it says: the store was asked already, and the record decides.
func (r *Runtime) notBefore(m Message) (time.Time, bool) {
	v, ok := m.Attributes[queue.NotBeforeAttribute]
	if !ok || m.Bound != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	now := time.Now()
	switch {
	case err != nil:
		r.opts.Logger.Warn("ignoring a not-before attribute that does not parse; handling the message now",
			"message_id", m.ID, "not_before", queue.Truncate(v, 64), "error", err)
		return time.Time{}, false
	case t.Sub(now) > MaxNotBeforeAhead:
		r.opts.Logger.Warn("ignoring a not-before attribute more than 400 days ahead; handling the message now",
			"message_id", m.ID, "not_before", v)
		return time.Time{}, false
	}
	return t, t.After(now)
}

// wait leaves d's message on the queue until until without moving it
// toward the DLQ: on its first receive it is made invisible until then
// (at most MaxVisibility from its receive); received before, it is
// requeued (a copy with the not-before is sent and this one deleted), the
// copy starting again at receive count 0. A copy that cannot be sent falls
// back to the visibility. On SQS a day of waiting costs about five
// requests: two receives, one visibility change, one send, one delete.
func (r *Runtime) wait(work context.Context, d *Delivery, until time.Time) {
	r.stats.waited.Add(1)
	if d.ReceiveCount > 1 && r.requeue(work, d, until) {
		return
	}
	r.hide(work, d, until)
}

// hide makes d's message invisible until until, or as long as its
// receive allows (SQS counts the 12 hours from the receive).
func (r *Runtime) hide(work context.Context, d *Delivery, until time.Time) {
	left := r.opts.MaxVisibility
	if !d.received.IsZero() {
		left -= time.Since(d.received)
	}
	delay := max(min(time.Until(until), left), 0)
	ctx, cancel := r.opCtx(work)
	defer cancel()
	if err := r.src.ChangeVisibility(ctx, d.Message, delay); err != nil {
		r.opts.Logger.Warn("could not make a waiting message invisible; it returns after its visibility timeout",
			"message_id", d.ID, "error", err)
	}
}

// requeue sends a copy of d's message that waits until until and, once it
// is sent, deletes the original. It reports false when no copy was sent.
// A message with no room for one more attribute (queue.MaxAttributes) is
// copied without the not-before: its copy is handed to the handler on its
// first receive, and waits by its record's answer.
func (r *Runtime) requeue(work context.Context, d *Delivery, until time.Time) bool {
	if r.sender == nil {
		return false
	}
	attrs := queue.OriginalAttributes(d.Attributes)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs[queue.NotBeforeAttribute] = until.UTC().Format(time.RFC3339Nano)
	if len(attrs) > queue.MaxAttributes || queue.CheckOutgoing(d.Body, attrs) != nil {
		// No room for the not-before beside the producer's attributes
		// (SQS takes 10, the trace header among them): the copy goes
		// without it, so that it still starts at receive count 0; its
		// first receive asks the record, which says how long it waits.
		delete(attrs, queue.NotBeforeAttribute)
	}
	ctx, cancel := r.opCtx(work)
	_, err := r.sender.Send(ctx, d.Body, attrs)
	cancel()
	if err != nil {
		if !errors.Is(err, ErrCannotSend) {
			r.opts.Logger.Warn("could not requeue a waiting message; making it invisible instead (its next receive counts toward the DLQ)",
				"message_id", d.ID, "receive_count", d.ReceiveCount, "error", err)
		}
		return false
	}
	r.stats.requeued.Add(1)
	ctx, cancel = r.opCtx(work)
	err = r.src.Ack(ctx, []Message{d.Message})
	cancel()
	var be *queue.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be) && errors.Is(be.Failed[d.ID], queue.ErrStaleReceipt):
		// Delivered again meanwhile: that delivery decides about it.
	default:
		// The copy waits on the queue; this one must not come back
		// before it is due either (the claim makes it a duplicate then).
		r.opts.Logger.Warn("requeued a waiting message but could not delete the original; making it invisible",
			"message_id", d.ID, "error", err)
		r.hide(work, d, until)
	}
	return true
}

func (r *Runtime) safeHandle(ctx context.Context, d *Delivery) (dec Decision) {
	defer func() {
		if p := recover(); p != nil {
			r.stats.panics.Add(1)
			r.opts.Logger.Error("handler panicked; leaving the message for redelivery",
				"message_id", d.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			dec = Decision{Action: Retry, Reason: queue.Reason{Code: "handler_panic", Detail: fmt.Sprint(p)}}
		}
	}()
	return r.h.Handle(ctx, d)
}

// heartbeat keeps d alive until the returned stop function is called: every
// HeartbeatInterval it extends the message's visibility and runs the beats
// the handler registered (such as extending a claim's lease).
func (r *Runtime) heartbeat(work context.Context, d *Delivery) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(r.opts.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-work.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(work, r.opts.OpTimeout)
			if err := r.src.ChangeVisibility(ctx, d.Message, r.opts.VisibilityTimeout); err != nil {
				r.opts.Logger.Warn("heartbeat: could not extend visibility", "message_id", d.ID, "error", err)
			}
			for _, err := range d.beat(ctx) {
				r.opts.Logger.Warn("heartbeat: a registered beat failed", "message_id", d.ID, "error", err)
			}
			cancel()
			r.stats.heartbeats.Add(1)
		}
	})
	return func() { close(done); wg.Wait() }
}

// Delivery is the message being handled, plus its heartbeat registry.
type Delivery struct {
	Message
	// received is when the receive that delivered it was asked for (no
	// later than the queue's receive): SQS's 12 hours of visibility count
	// from there.
	received time.Time
	mu       sync.Mutex
	next     int
	beats    map[int]func(context.Context) error
}

// Register adds a function to run on every heartbeat while the message is
// handled (idempotency.Heartbeat). A beat that returns an error is logged and
// runs again on the next heartbeat (a transient store error must not stop
// a lease from being renewed); the handler unregisters it with the returned
// function.
func (d *Delivery) Register(beat func(ctx context.Context) error) (unregister func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.beats == nil {
		d.beats = map[int]func(context.Context) error{}
	}
	id := d.next
	d.next++
	d.beats[id] = beat
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.beats, id)
	}
}

func (d *Delivery) beat(ctx context.Context) []error {
	d.mu.Lock()
	beats := make([]func(context.Context) error, 0, len(d.beats))
	for _, b := range d.beats {
		beats = append(beats, b)
	}
	d.mu.Unlock() // a beat may unregister itself
	var errs []error
	for _, b := range beats {
		if err := b(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
