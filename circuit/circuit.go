// Package circuit is a circuit breaker for an outside dependency that fails
// as a whole (a core-banking system in its end-of-day window, a gateway
// whose token expired). It counts consecutive failures; past a threshold it
// opens: callers are refused at once (Allow) and a consumer stops receiving
// (Wait), so that an outage costs no queue receives and never dead-letters
// a backlog. While open it probes the dependency with a growing interval;
// when a probe answers, it half-opens: work flows again, the first success
// closes it and the first failure opens it again.
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
	// Required for Run.
	Probe func(ctx context.Context) error
	// Logger gets one line when the circuit opens, half-opens and closes.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock for the times the breaker reports. Default time.Now.
	Now func() time.Time
}

// Breaker is safe for concurrent use. Create it with New.
type Breaker struct {
	opts Options

	mu        sync.Mutex
	state     State
	failures  int
	openedAt  time.Time
	lastError string
	changed   chan struct{} // closed and replaced on every state change
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
	return &Breaker{opts: opts, changed: make(chan struct{})}, nil
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
}

// Status returns a snapshot.
func (b *Breaker) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Status{State: b.state, Failures: b.failures, OpenedAt: b.openedAt, LastError: b.lastError}
}

// Allow returns ErrOpen while the circuit is open, else nil.
func (b *Breaker) Allow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open {
		return ErrOpen
	}
	return nil
}

// Record reports the result of one call: err == nil for an answer that
// shows the dependency works (a success, or a business refusal such as a
// decline), else the failure.
func (b *Breaker) Record(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.failures = 0
		if b.state == HalfOpen {
			b.set(Closed, "a call succeeded after the probe; resuming fully")
		}
		return
	}
	b.failures++
	b.lastError = err.Error()
	switch {
	case b.state == HalfOpen:
		b.openedAt = b.opts.Now()
		b.set(Open, "a call failed right after the probe; pausing again")
	case b.state == Closed && b.failures >= b.opts.Threshold:
		b.openedAt = b.opts.Now()
		b.set(Open, fmt.Sprintf("%d consecutive failures; pausing until a probe answers", b.failures))
	}
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
	close(b.changed)
	b.changed = make(chan struct{})
}

// Wait blocks while the circuit is open; it returns nil once it is closed
// or half-open, or ctx's error.
func (b *Breaker) Wait(ctx context.Context) error {
	for {
		b.mu.Lock()
		state, changed := b.state, b.changed
		b.mu.Unlock()
		if state != Open {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run probes the dependency while the circuit is open, until ctx ends: the
// first probe ProbeInterval after opening, then at doubling intervals up to
// MaxProbeInterval. A probe that answers half-opens the circuit.
func (b *Breaker) Run(ctx context.Context) error {
	if b.opts.Probe == nil {
		return errors.New("circuit: Run needs a Probe")
	}
	for {
		b.mu.Lock()
		state, changed := b.state, b.changed
		b.mu.Unlock()
		if state != Open {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		interval := b.opts.ProbeInterval
		for {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			}
			pctx, cancel := context.WithTimeout(ctx, b.opts.ProbeTimeout)
			err := b.opts.Probe(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			b.mu.Lock()
			if b.state != Open { // a call closed it meanwhile
				b.mu.Unlock()
				break
			}
			if err == nil {
				b.set(HalfOpen, "the probe answered; letting work through")
				b.mu.Unlock()
				break
			}
			b.lastError = "probe: " + err.Error()
			b.mu.Unlock()
			b.opts.Logger.Warn("circuit probe failed: "+b.opts.Name, slog.String("error", err.Error()),
				slog.String("next_probe_in", min(interval*2, b.opts.MaxProbeInterval).String()))
			interval = min(interval*2, b.opts.MaxProbeInterval)
		}
	}
}
