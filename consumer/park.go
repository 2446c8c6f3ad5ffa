package consumer

import (
	"context"
	"sync"
	"time"
)

// parked is a message kept in hand while the gate is paused.
type parked struct {
	d       *Delivery
	due     time.Time
	stop    chan struct{} // closed when it leaves the lot
	stopped chan struct{} // closed when its heartbeat has stopped
}

// lot holds the parked messages, at most max.
type lot struct {
	mu      sync.Mutex
	max     int
	ps      []*parked
	changed chan struct{} // closed and replaced on every change
}

func newLot(max int) *lot { return &lot{max: max, changed: make(chan struct{})} }

func (l *lot) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *lot) add(p *parked) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ps) >= l.max {
		return false
	}
	l.ps = append(l.ps, p)
	l.wake()
	return true
}

func (l *lot) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ps)
}

func (l *lot) full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ps) >= l.max
}

// detach removes ps[i] and stops its heartbeat. Caller holds mu.
func (l *lot) detach(i int) *parked {
	p := l.ps[i]
	l.ps = append(l.ps[:i], l.ps[i+1:]...)
	close(p.stop)
	l.wake()
	return p
}

// takeDue removes the parked message due earliest, if it is due at now,
// and returns it with its heartbeat stopped; nil if none is due.
func (l *lot) takeDue(now time.Time) *Delivery {
	l.mu.Lock()
	best := -1
	for i, p := range l.ps {
		if !p.due.After(now) && (best < 0 || p.due.Before(l.ps[best].due)) {
			best = i
		}
	}
	if best < 0 {
		l.mu.Unlock()
		return nil
	}
	p := l.detach(best)
	l.mu.Unlock()
	<-p.stopped
	return p.d
}

func (l *lot) hasDue(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.ps {
		if !p.due.After(now) {
			return true
		}
	}
	return false
}

// waitDue blocks until the earliest parked message is due, the lot
// changes, or ctx ends.
func (l *lot) waitDue(ctx context.Context) {
	l.mu.Lock()
	changed := l.changed
	var next time.Time
	for _, p := range l.ps {
		if next.IsZero() || p.due.Before(next) {
			next = p.due
		}
	}
	l.mu.Unlock()
	if next.IsZero() {
		select {
		case <-changed:
		case <-ctx.Done():
		}
		return
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	select {
	case <-t.C:
	case <-changed:
	case <-ctx.Done():
	}
}

// remove takes p out of the lot; false if it was no longer there.
func (l *lot) remove(p *parked) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.ps {
		if q == p {
			l.ps = append(l.ps[:i], l.ps[i+1:]...)
			l.wake()
			return true
		}
	}
	return false
}

// takeAll empties the lot and stops every heartbeat.
func (l *lot) takeAll() []*parked {
	l.mu.Lock()
	ps := l.ps
	l.ps = nil
	for _, p := range ps {
		close(p.stop)
	}
	l.wake()
	l.mu.Unlock()
	for _, p := range ps {
		<-p.stopped
	}
	return ps
}
