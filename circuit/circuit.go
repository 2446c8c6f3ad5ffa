// Package circuit is a circuit breaker for an outside dependency that fails
// as a whole (a core-banking system in its end-of-day window, a gateway
// whose token expired, a store that cannot be reached). It counts
// consecutive failures; past a threshold it opens: callers are refused at
// once (Allow) and a consumer stops receiving (Wait), so that an outage
// costs no queue receives and never dead-letters a backlog.
//
// While open it waits an interval, then asks the optional Probe (a health
// endpoint). A health endpoint is a hint, not proof: a probe that answers
// only half-opens the circuit, and half-open admits exactly one trial call
// (Allow grants it to one caller; Wait tells a consumer to hand over one
// message and wait for its decision). The trial's success closes the
// circuit; its failure opens it again with the interval doubled, up to its
// cap; the interval starts from its minimum again only once the circuit
// closes. Without a Probe, the trial call itself is the probe.
//
// Every call is allowed with a Ticket, and its result is reported with it.
// A ticket belongs to the era (closed, open or half-open, one generation
// each) it was handed out in: the result of a call allowed in an earlier
// era (a slow call started while the circuit was closed, answering while
// it is half-open) moves nothing; only the trial's own result closes or
// reopens a half-open circuit. A trial that ends without a call (its
// caller found nothing to ask) is given back with Abandon: it closes
// nothing, and the next call can be the trial.
//
// It imports only the standard library.
package circuit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrOpen is returned by Allow while the circuit is open.
var ErrOpen = errors.New("circuit open: the dependency is failing; not calling it")

// State is the breaker's state.
type State int

// The states. The numbers are what the metrics gauge shows.
const (
	Closed   State = 0
	HalfOpen State = 1
	Open     State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Options configure a Breaker. Zero fields take the defaults.
type Options struct {
	// Name says what is guarded, in logs ("core banking").
	Name string
	// Threshold is how many consecutive failures open the circuit. Default 5.
	Threshold int
	// ProbeInterval is the first wait between probes while open; it doubles
	// after each failed probe up to MaxProbeInterval. Defaults 5s and 60s.
	ProbeInterval    time.Duration
	MaxProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default 5s.
	ProbeTimeout time.Duration
	// Probe asks the dependency whether it answers (a health endpoint).
	// Optional: without it, the circuit half-opens when the interval has
	// passed, and the trial call is the probe.
	Probe func(ctx context.Context) error
	// Logger gets one line when the circuit opens, half-opens and closes.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock for the times the breaker reports. Default time.Now.
	Now func() time.Time
	// Summarize puts a failure in words that may be shown to anyone
	// (Status.LastCause: /readyz), without the dependency's own text or
	// where it lives. Default: none ("").
	Summarize func(error) string
}

// Breaker is safe for concurrent use. Create it with New.
type Breaker struct {
	opts Options

	mu        sync.Mutex
	state     State
	failures  int
	openedAt  time.Time
	lastError string
	lastCause string
	// interval is the wait before the next probe: ProbeInterval after the
	// circuit closed, doubled by every failed probe or trial.
	interval time.Duration
	// trial: half-open, and the one trial call has been granted and has not
	// answered yet.
	trial bool
	// gen is the era: one more on every change of state, so that a ticket
	// handed out before the change is known as stale.
	gen     uint64
	opens   int           // how often it opened (for tests and status)
	changed chan struct{} // closed and replaced on every change of state or trial
}

// New returns a closed breaker.
func New(opts Options) (*Breaker, error) {
	if opts.Threshold < 0 || opts.ProbeInterval < 0 || opts.MaxProbeInterval < 0 || opts.ProbeTimeout < 0 {
		return nil, errors.New("circuit: Threshold and intervals must not be negative")
	}
	if opts.Name == "" {
		opts.Name = "dependency"
	}
	if opts.Threshold == 0 {
		opts.Threshold = 5
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	if opts.MaxProbeInterval == 0 {
		opts.MaxProbeInterval = 60 * time.Second
	}
	if opts.MaxProbeInterval < opts.ProbeInterval {
		return nil, fmt.Errorf("circuit: MaxProbeInterval %s is shorter than ProbeInterval %s", opts.MaxProbeInterval, opts.ProbeInterval)
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Breaker{opts: opts, interval: opts.ProbeInterval, gen: 1, changed: make(chan struct{})}, nil
}

// Status is a snapshot of the breaker for health checks and metrics.
type Status struct {
	State State
	// Failures is the current run of consecutive failures.
	Failures int
	// OpenedAt is when the circuit last opened (zero if never).
	OpenedAt time.Time
	// LastError is the failure that opened it (or the last one).
	LastError string
	// LastCause is LastError in Options.Summarize's words ("" without).
	LastCause string
	// NextProbeIn is the interval the next probe (or trial) waits while
	// open: it doubles with every failed probe or trial, up to the cap.
	NextProbeIn time.Duration
	// TrialOut: half-open, and the one trial call is under way.
	TrialOut bool
	// Opens counts how often the circuit opened since it was made.
	Opens int
}

// Status returns a snapshot.
func (b *Breaker) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Status{State: b.state, Failures: b.failures, OpenedAt: b.openedAt, LastError: b.lastError, LastCause: b.lastCause,
		NextProbeIn: b.interval, TrialOut: b.trial, Opens: b.opens}
}

// Ticket is one call's permission, handed out by Allow; the call's result
// is reported with it (Record, Abandon). The zero Ticket is stale in every
// era: its result moves nothing.
type Ticket struct {
	gen   uint64 // the era it was handed out in
	trial bool   // the one trial call of a half-open era
}

// Trial reports whether t is the trial call of a half-open circuit.
func (t Ticket) Trial() bool { return t.trial }

// Allow asks to make one call. It returns a nil error when the call may go
// ahead: always while closed, and for exactly one caller while half-open
// (the trial); otherwise ErrOpen. The Ticket is returned either way: a
// caller that must make its call regardless (a result that has to be
// written) reports it too, and it counts as far as its era allows. Report
// the call's result with Record, or with Abandon when the call ended
// without an answer that says anything about the dependency (its own
// context ended, or it turned out not to be needed).
func (b *Breaker) Allow() (Ticket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == Closed:
		return Ticket{gen: b.gen}, nil
	case b.state == HalfOpen && !b.trial:
		b.trial = true
		b.wake()
		return Ticket{gen: b.gen, trial: true}, nil
	}
	return Ticket{gen: b.gen}, ErrOpen
}

// Abandon reports that t's call ended without an answer (its caller gave
// up) or was never made: nothing is learnt, and if t is the trial it is
// given back, so that the next call can be the trial.
func (b *Breaker) Abandon(t Ticket) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.trial && t.gen == b.gen && b.state == HalfOpen && b.trial {
		b.trial = false
		b.wake()
	}
}

// Record reports the result of t's call: err == nil for an answer that
// shows the dependency works (a success, or a business refusal such as a
// decline), else the failure. A result from an earlier era than the
// current one (t was handed out before the state last changed) moves
// nothing; while half-open only the trial's result does.
func (b *Breaker) Record(t Ticket, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.gen != b.gen || (b.state == HalfOpen && !t.trial) {
		return // stale, or not the trial: it says nothing about now
	}
	if err == nil {
		b.failures = 0
		if b.state == HalfOpen {
			b.interval = b.opts.ProbeInterval
			b.set(Closed, "the trial call succeeded; resuming fully")
		}
		return
	}
	b.failures++
	b.lastError, b.lastCause = err.Error(), b.summarize(err)
	switch {
	case b.state == HalfOpen:
		b.interval = min(b.interval*2, b.opts.MaxProbeInterval)
		b.open("the trial call failed; pausing again, next trial in " + b.interval.String())
	case b.state == Closed && b.failures >= b.opts.Threshold:
		b.interval = b.opts.ProbeInterval
		b.open(fmt.Sprintf("%d consecutive failures; pausing until a trial call succeeds", b.failures))
	}
}

// open moves to Open. Caller holds mu.
func (b *Breaker) open(why string) {
	b.openedAt = b.opts.Now()
	b.opens++
	b.set(Open, why)
}

// set changes the state and wakes every waiter. Caller holds mu.
func (b *Breaker) set(s State, why string) {
	if s == b.state {
		return
	}
	level := slog.LevelWarn
	if s == Open {
		level = slog.LevelError
	}
	b.opts.Logger.Log(context.Background(), level, "circuit "+s.String()+": "+b.opts.Name,
		slog.String("circuit", s.String()), slog.String("from", b.state.String()), slog.String("why", why),
		slog.Int("consecutive_failures", b.failures), slog.String("last_error", b.lastError))
	b.state = s
	b.trial = false
	b.gen++
	b.wake()
}

// wake wakes every waiter. Caller holds mu.
func (b *Breaker) wake() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Paused reports whether the dependency is not known to work now: the
// circuit is open or half-open, or the last call failed (an outage that has
// not reached the threshold yet). A consumer keeps a message it must retry
// then in hand instead of returning it to the queue, so that the failures
// that open the circuit cost no extra receive either.
func (b *Breaker) Paused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != Closed || b.failures > 0
}

// Wait blocks while receiving must pause: while the circuit is open, and
// while the trial call of a half-open circuit is under way. It returns
// trial == false when the circuit is closed (receive as usual), trial ==
// true when it is half-open with the trial not yet taken (hand over one
// message and wait for its decision before asking again), or ctx's error.
func (b *Breaker) Wait(ctx context.Context) (trial bool, err error) {
	for {
		b.mu.Lock()
		state, out, changed := b.state, b.trial, b.changed
		b.mu.Unlock()
		switch {
		case state == Closed:
			return false, nil
		case state == HalfOpen && !out:
			return true, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// Run watches the circuit until ctx ends. Each time it opens, Run waits
// the current interval, then asks the Probe (when there is one): an answer
// half-opens the circuit, a failure doubles the interval (up to
// MaxProbeInterval) and waits again. Without a Probe the circuit half-opens
// when the interval has passed, and the trial call is the probe.
func (b *Breaker) Run(ctx context.Context) error {
	for {
		b.mu.Lock()
		state, changed, interval := b.state, b.changed, b.interval
		b.mu.Unlock()
		if state != Open {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
		var err error
		if b.opts.Probe != nil {
			pctx, cancel := context.WithTimeout(ctx, b.opts.ProbeTimeout)
			err = b.opts.Probe(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
		}
		b.mu.Lock()
		switch {
		case b.state != Open: // a call closed it meanwhile
		case err == nil:
			why := "the interval passed; one trial call decides"
			if b.opts.Probe != nil {
				why = "the probe answered; one trial call decides (a health check is a hint, not proof)"
			}
			b.set(HalfOpen, why)
		default:
			b.lastError, b.lastCause = "probe: "+err.Error(), b.summarize(err)
			b.interval = min(b.interval*2, b.opts.MaxProbeInterval)
			b.opts.Logger.Warn("circuit probe failed: "+b.opts.Name, slog.String("error", err.Error()),
				slog.String("next_probe_in", b.interval.String()))
		}
		b.mu.Unlock()
	}
}

func (b *Breaker) summarize(err error) string {
	if b.opts.Summarize == nil {
		return ""
	}
	return b.opts.Summarize(err)
}
