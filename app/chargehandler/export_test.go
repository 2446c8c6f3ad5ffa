package chargehandler

import (
	"sync"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// CountParses counts charge.ParseEvent's calls of this package by body
// until the test ends.
func CountParses(t *testing.T) func(body string) int {
	var mu sync.Mutex
	n := map[string]int{}
	t.Cleanup(func() { parseEvent = charge.ParseEvent })
	parseEvent = func(body []byte) (charge.Charge, error) {
		mu.Lock()
		n[string(body)]++
		mu.Unlock()
		return charge.ParseEvent(body)
	}
	return func(body string) int {
		mu.Lock()
		defer mu.Unlock()
		return n[body]
	}
}
