package protosim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The scheduler runs every actor on a goroutine of its own but lets exactly
// one of them run at a time: an actor runs until its next call of the
// outside world (a store, the bank, the queue — a gate), parks there, and
// the scheduler, drawing from the seed, chooses who goes next, moves the
// simulated clock, and decides whether that call fails, loses its answer,
// or whether the actor dies right there. The actors' own code is the
// project's (charge.Service, reconcile.Resolve, operate.Reopen,
// approval.Book): only the world around them is simulated.

// fault is what the scheduler does to one call.
type fault int

const (
	pass       fault = iota
	failBefore       // the call fails and changes nothing
	loseAnswer       // the call lands, and its answer is lost (an error)
)

func (f fault) String() string {
	switch f {
	case failBefore:
		return "fails"
	case loseAnswer:
		return "answer lost"
	}
	return ""
}

// errCrashed is what a dead actor's deferred clean-up calls get: a process
// that died does nothing more.
var errCrashed = errors.New("protosim: the actor died")

type actorKey struct{}

type kind int

const (
	kindDeliverer kind = iota
	kindProducer
	kindOperator
	kindBank
)

func (k kind) String() string {
	switch k {
	case kindDeliverer:
		return "consumer"
	case kindOperator:
		return "operator"
	}
	return "world actor"
}

type actor struct {
	name    string
	kind    kind
	resume  chan bool // true: die at this gate
	parked  chan struct{}
	idle    bool      // waiting for wake (nothing to do before then)
	wake    time.Time // for idle
	done    bool
	crashed bool
	exiting bool   // the actor's own goroutine is unwinding (runtime.Goexit)
	gid     uint64 // the actor's own goroutine
	label   string
	// task numbers the operator task under way, for the invariants that
	// look at what one task left behind.
	task int
	// proposal is the approval whose run the actor is in ("" none).
	proposal string
}

func actorOf(ctx context.Context) *actor {
	a, _ := ctx.Value(actorKey{}).(*actor)
	return a
}

// clock is the simulated clock: every component reads it (the Guard, the
// service, the bank, the queue, reconciliation, approvals).
type clock struct{ s *Sim }

func (c clock) Now() time.Time { return c.s.now }

// Sleep moves the clock (the Guard's pause between two tries of a write):
// only the running actor calls it, so nothing else sees time move under it.
func (c clock) Sleep(d time.Duration) { c.s.now = c.s.now.Add(d) }

// spawn starts fn as an actor; it runs when the scheduler first picks it.
func (s *Sim) spawn(name string, k kind, fn func(ctx context.Context, a *actor)) *actor {
	a := &actor{name: name, kind: k, resume: make(chan bool), parked: make(chan struct{})}
	s.actors = append(s.actors, a)
	ctx := context.WithValue(s.ctx, actorKey{}, a)
	go func() {
		a.gid = goid()
		defer func() {
			if r := recover(); r != nil {
				s.panicked = fmt.Sprintf("%s panicked: %v\n%s", a.name, r, debug.Stack())
			}
			a.done = true
			a.parked <- struct{}{}
		}()
		if <-a.resume {
			a.crashed = true
			s.tracef("%s dies before it starts", a.name)
			runtime.Goexit()
		}
		fn(ctx, a)
	}()
	return a
}

// gate is an actor's call of the outside world, named what. It returns the
// fault to apply to the call, or errCrashed for a dead actor; it does not
// return at all when the actor dies at it. Outside an actor (the final
// checks) it passes at once.
func (s *Sim) gate(ctx context.Context, what string) (fault, error) {
	a := actorOf(ctx)
	if a == nil {
		return pass, nil
	}
	if a.crashed {
		a.die()
		return pass, errCrashed
	}
	a.label = what
	a.parked <- struct{}{}
	if <-a.resume {
		a.crashed = true
		s.saw("death: " + a.kind.String())
		s.tracef("%s DIES before %s", a.name, what)
		a.die()
		return pass, errCrashed
	}
	return s.pending, nil
}

// die ends a dead actor's own goroutine where it stands (its deferred
// calls run, and get errCrashed from every gate). On a goroutine the
// actor started (reconcile's reader, a notice's send) the call fails
// instead, and the actor dies at its next call on its own goroutine.
func (a *actor) die() {
	if !a.exiting && goid() == a.gid {
		a.exiting = true
		runtime.Goexit()
	}
}

// goid is the running goroutine's id (from its stack's first line).
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// sleep parks a until the clock reaches t (or something else happens:
// the scheduler wakes idle actors when the clock passes their time).
func (s *Sim) sleep(ctx context.Context, t time.Time) error {
	a := actorOf(ctx)
	if a == nil || a.crashed {
		return errCrashed
	}
	a.idle, a.wake, a.label = true, t, "sleep"
	a.parked <- struct{}{}
	dead := <-a.resume
	a.idle = false
	if dead {
		a.crashed = true
		s.tracef("%s DIES while idle", a.name)
		a.die()
		return errCrashed
	}
	return nil
}

// run schedules the actors until every one is done, or the step budget
// runs out.
func (s *Sim) run() error {
	for {
		if s.panicked != "" {
			return errors.New(s.panicked)
		}
		// The dead and finished leave the cast.
		s.actors = slices.DeleteFunc(s.actors, func(a *actor) bool { return a.done })
		if !s.final && !slices.ContainsFunc(s.actors, func(a *actor) bool { return a.kind != kindDeliverer }) {
			s.final, s.quiet = true, true
			s.tracef("every operator is done: the final drain, without faults")
		}
		ready, idle := s.ready[:0], s.idle[:0]
		for _, a := range s.actors {
			switch {
			case a.idle && a.wake.After(s.now):
				idle = append(idle, a)
			default:
				ready = append(ready, a)
			}
		}
		s.ready, s.idle = ready, idle
		if len(ready) == 0 && len(idle) == 0 {
			return nil
		}
		if s.steps++; s.steps > s.cfg.MaxSteps {
			var where []string
			for _, a := range append(ready, idle...) {
				where = append(where, a.name+" at "+a.label)
			}
			return fmt.Errorf("no end after %d steps (%s)", s.cfg.MaxSteps, strings.Join(where, "; "))
		}
		if len(ready) == 0 {
			// Nothing to do before the earliest wake: the clock jumps.
			next := idle[0].wake
			for _, a := range idle[1:] {
				if a.wake.Before(next) {
					next = a.wake
				}
			}
			s.now = next
			continue
		}
		a := ready[s.rng.IntN(len(ready))]
		// Time passes between two steps: a few hundred milliseconds.
		s.now = s.now.Add(time.Duration(s.rng.ExpFloat64() * float64(s.cfg.Step)))
		die, f := s.decide(a)
		s.pending = f
		if f != pass {
			s.saw("call that " + f.String())
			s.tracef("%s: %s %s", a.name, a.label, f)
		}
		a.resume <- die
		<-a.parked
		if a.done && a.crashed && s.respawn != nil {
			s.respawn(a)
		}
	}
}

// decide draws whether a dies at its gate, and the fault of its call.
func (s *Sim) decide(a *actor) (die bool, f fault) {
	if s.quiet || a.kind == kindProducer || a.kind == kindBank {
		return false, pass
	}
	if a.label != "sleep" && a.label != "queue.Receive" && s.rng.Float64() < s.cfg.CrashRate {
		return true, pass
	}
	if strings.HasPrefix(a.label, "store.") && s.now.Before(s.storeAwayUntil) {
		return false, failBefore
	}
	if a.label == "sleep" || strings.HasPrefix(a.label, "queue.") {
		return false, pass
	}
	switch r := s.rng.Float64(); {
	case r < s.cfg.FailRate:
		return false, failBefore
	case r < s.cfg.FailRate+s.cfg.LoseRate:
		return false, loseAnswer
	}
	return false, pass
}

func (s *Sim) tracef(format string, args ...any) {
	if s.cfg.NoTrace {
		return
	}
	s.trace = append(s.trace, fmt.Sprintf("%8s  ", s.now.Sub(s.start).Truncate(time.Millisecond))+fmt.Sprintf(format, args...))
}

// newRand is the run's random source: everything drawn comes from seed.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
