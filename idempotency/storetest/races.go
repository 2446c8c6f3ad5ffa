package storetest

import (
	"sync"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
)

var racesCases = []testCase{
	{"FiftyConcurrentClaimsOneWinner", func(t *testing.T, e *env) {
		outcomes := race(t, e, 50)
		if outcomes[idempotency.Acquired] != 1 || outcomes[idempotency.DuplicateInProgress] != 49 {
			t.Fatalf("outcomes = %v, want 1 acquired and 49 duplicate_in_progress", outcomes)
		}
	}},
	{"FiftyConcurrentReclaimsOneWinner", func(t *testing.T, e *env) {
		e.claim(t, fpA, idempotency.Acquired)
		e.clock.Advance(Lease)
		outcomes := race(t, e, 50)
		if outcomes[idempotency.Reclaimed] != 1 || outcomes[idempotency.DuplicateInProgress] != 49 {
			t.Fatalf("outcomes = %v, want 1 reclaimed and 49 duplicate_in_progress", outcomes)
		}
		if got := e.get(t); got.Attempt != 2 {
			t.Fatalf("attempt after one reclaim = %d, want 2", got.Attempt)
		}
	}},
}

// race runs n claims on e.key at once and counts the outcomes. The winner's
// token must be the one stored.
func race(t *testing.T, e *env, n int) map[idempotency.Outcome]int {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[idempotency.Outcome]int{}
		winner   string
		start    = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			c, err := e.g.Claim(t.Context(), e.key, fpA)
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			outcomes[c.Outcome]++
			if c.Outcome.Owned() {
				winner = c.Record.Token
			}
		})
	}
	close(start)
	wg.Wait()
	if got := e.get(t); winner == "" || got.Token != winner {
		t.Fatalf("stored token %q, winner's token %q", got.Token, winner)
	}
	return outcomes
}
