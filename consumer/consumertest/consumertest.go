// Package consumertest runs a consumer.Runtime in a test: make it (New),
// Start it, wait for a condition, stop it and see Run's error.
package consumertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/consumer"
)

// New is consumer.New, failing t on an error.
func New(t testing.TB, src consumer.Source, h consumer.Handler, o consumer.Options) *consumer.Runtime {
	t.Helper()
	rt, err := consumer.New(src, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

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
