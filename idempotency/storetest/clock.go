// Package storetest is the conformance suite every driver.Store must
// pass, in the spirit of gocloud.dev's drivertest: one set of behavioural
// tests, run by each backend's own test against a real instance.
package storetest

import (
	"sync"
	"time"
)

// Clock is a manual clock for tests. Its readings are whole milliseconds
// (the resolution every store keeps). The zero value reads Epoch.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Epoch is where a zero Clock starts: month-end, the bank's busiest day.
var Epoch = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// NewClock returns a clock reading t truncated to the millisecond.
func NewClock(t time.Time) *Clock { return &Clock{t: t.Truncate(time.Millisecond)} }

// Now returns the current reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = Epoch
	}
	return c.t
}

// Advance moves the clock forward by d (truncated to the millisecond).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = Epoch
	}
	c.t = c.t.Add(d.Truncate(time.Millisecond))
}
