// Package consumertest runs a consumer.Runtime in a test: Start it, wait
// for a condition, stop it and see Run's error.
package consumertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/consumer"
)

// Start runs rt until the returned stop is called (or the test ends); stop
// waits for Run and reports its error on t.
func Start(t testing.TB, rt *consumer.Runtime) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// WaitFor polls cond every 5 ms until it holds, and fails t, naming what
// it waited for, if it does not within 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
