package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// waitOnce claims e.key and finishes it to WAITING a lease from now under
// generation 2 with one history line, and returns that request.
func (e *env) waitOnce(t *testing.T) driver.FinishRequest {
	t.Helper()
	c := e.claim(t, fpA, idempotency.Acquired)
	now := e.clock.Now()
	f := driver.FinishRequest{Key: e.key, Token: c.Record.Token, State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
		Detail: "after INSUFFICIENT_FUNDS", Now: now, ExpiresAt: now.Add(Lease + Retention), NotBefore: now.Add(Lease),
		Generation: 2, History: []string{"generation 1: INSUFFICIENT_FUNDS"}}
	if err := e.s.Finish(t.Context(), f); err != nil {
		t.Fatalf("Finish to WAITING: %v", err)
	}
	return f
}

var waitingCases = []testCase{
	{"AWaitIsCountedListedWalkedAndNeverStuck", func(t *testing.T, e *env) {
		ctx := t.Context()
		// Counted: the counts at one instant, before and after the wait.
		c := e.claim(t, fpA, idempotency.Acquired)
		at := e.clock.Now().Add(2 * Lease)
		counter, counts := e.s.(driver.StateCounter)
		var before map[driver.State]int
		if counts {
			var err error
			if before, err = counter.CountByState(ctx, at); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(time.Second)
		now := e.clock.Now()
		f := driver.FinishRequest{Key: e.key, Token: c.Record.Token, State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
			Detail: "after INSUFFICIENT_FUNDS", Now: now, ExpiresAt: now.Add(Lease + Retention), NotBefore: now.Add(time.Second),
			Generation: 2, History: []string{"generation 1: INSUFFICIENT_FUNDS"}}
		if err := e.s.Finish(ctx, f); err != nil {
			t.Fatalf("Finish to WAITING: %v", err)
		}
		r := e.get(t)
		if r.State != driver.StateWaiting || !r.LeaseUntil.Equal(f.NotBefore) || r.Status != f.Status || r.Detail != f.Detail ||
			r.Generation != 2 || !slices.Equal(r.History, f.History) || !r.ExpiresAt.Equal(f.ExpiresAt) || !r.UpdatedAt.Equal(now) ||
			r.Attempt != 1 || r.Fingerprint != fpA || !r.CreatedAt.Equal(c.Record.CreatedAt) {
			t.Fatalf("the waiting record = %+v, want WAITING until %v, the result, generation 2, the history line, attempt 1", r, f.NotBefore)
		}
		if counts {
			after, err := counter.CountByState(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			if after[driver.StateWaiting] != before[driver.StateWaiting]+1 || after[driver.StateInProgress] != before[driver.StateInProgress]-1 {
				t.Errorf("counts before the wait %v, after %v; want one more WAITING, one less IN_PROGRESS", before, after)
			}
		}
		// Long past its not-before, and still waiting (no delivery came):
		// not stuck — its work ended cleanly.
		e.clock.Advance(time.Hour)
		now = e.clock.Now()
		if sl, ok := e.s.(driver.StuckLister); ok {
			recs, _, err := sl.Stuck(ctx, now, 100000)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range recs {
				if s.Key == e.key {
					t.Errorf("Stuck listed the waiting record %+v", s)
				}
			}
		}
		if l, ok := e.s.(driver.StateLister); ok {
			p := listPage(t, l, driver.ListRequest{State: driver.StateWaiting, Prefix: e.key, Now: now})
			if keys := keysOf(p); !slices.Equal(keys, []string{e.key}) {
				t.Errorf("ListState(WAITING) = %v, want the waiting record", keys)
			}
			if p := listPage(t, l, driver.ListRequest{State: driver.StateInProgress, Prefix: e.key, Now: now}); len(p.Records) != 0 {
				t.Errorf("ListState(IN_PROGRESS) = %v, want none", keysOf(p))
			}
			p = listPage(t, l, driver.ListRequest{State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Prefix: e.key, Now: now})
			if keys := keysOf(p); !slices.Equal(keys, []string{e.key}) {
				t.Errorf("ListState(WAITING, RETRY_SCHEDULED) = %v, want the waiting record", keys)
			}
		}
		if rl, ok := e.s.(driver.ResultLister); ok {
			list, err := rl.ListByResult(ctx, driver.StateWaiting, "RETRY_SCHEDULED", now, 100000)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(list, func(r driver.Record) bool { return r.Key == e.key }) {
				t.Errorf("ListByResult(WAITING, RETRY_SCHEDULED) does not list the waiting record")
			}
		}
		var walked []string
		err := driver.Walk(ctx, e.s, driver.WalkRequest{State: driver.StateWaiting, From: f.Now, To: f.Now.Add(time.Millisecond), Now: now},
			func(r driver.Record) error {
				walked = append(walked, r.Key)
				return nil
			})
		switch {
		case errors.Is(err, driver.ErrNotIndexed):
		case err != nil:
			t.Fatalf("Walk(WAITING): %v", err)
		case !slices.Contains(walked, e.key):
			t.Errorf("Walk(WAITING) visited %v, not the waiting record", walked)
		}
	}},
	{"AFinishReplacesGenerationAndHistoryOnlyWhenGiven", func(t *testing.T, e *env) {
		ctx := t.Context()
		for _, tc := range []struct {
			name        string
			state       driver.State
			generation  int
			history     []string
			wantGen     int
			wantHistory []string
		}{
			{"DONE, a history line added", driver.StateDone, 0, []string{"generation 1: INSUFFICIENT_FUNDS", "generation 2: posted"},
				2, []string{"generation 1: INSUFFICIENT_FUNDS", "generation 2: posted"}},
			{"FAILED, a new generation, the history kept", driver.StateFailed, 3, nil, 3, []string{"generation 1: INSUFFICIENT_FUNDS"}},
			{"WAITING again, both replaced", driver.StateWaiting, 3, []string{"one", "two"}, 3, []string{"one", "two"}},
			{"WAITING again, neither given", driver.StateWaiting, 0, nil, 2, []string{"generation 1: INSUFFICIENT_FUNDS"}},
			{"DONE, the history emptied", driver.StateDone, 0, []string{}, 2, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := &env{g: e.g, s: e.s, clock: e.clock, key: uniqueKey(t)}
				w := e.waitOnce(t)
				e.clock.Advance(Lease)
				c := e.claim(t, fpA, idempotency.Acquired) // resumed: generation 2 and the history carried
				if c.Record.Generation != 2 || !slices.Equal(c.Record.History, w.History) || c.Record.Attempt != 2 {
					t.Fatalf("resumed record = %+v, want generation 2, the history, attempt 2", c.Record)
				}
				now := e.clock.Now()
				f := driver.FinishRequest{Key: e.key, Token: c.Record.Token, State: tc.state, Status: "S", Detail: "D", Now: now,
					ExpiresAt: now.Add(Retention), Generation: tc.generation, History: tc.history}
				if tc.state == driver.StateWaiting {
					f.NotBefore = now.Add(Lease)
				}
				if err := e.s.Finish(ctx, f); err != nil {
					t.Fatalf("Finish: %v", err)
				}
				r := e.get(t)
				if r.State != tc.state || r.Generation != tc.wantGen || len(r.History) != len(tc.wantHistory) ||
					(len(tc.wantHistory) > 0 && !slices.Equal(r.History, tc.wantHistory)) {
					t.Fatalf("record = %s generation %d history %q, want %s generation %d history %q",
						r.State, r.Generation, r.History, tc.state, tc.wantGen, tc.wantHistory)
				}
			})
		}
	}},
	{"AFinishToWaitingNeedsItsNotBefore", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		now := e.clock.Now()
		err := e.s.Finish(t.Context(), driver.FinishRequest{Key: e.key, Token: c.Record.Token, State: driver.StateWaiting, Status: "S",
			Now: now, ExpiresAt: now.Add(Retention)})
		if !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("Finish to WAITING without a not-before: %v, want ErrInvalid", err)
		}
		if r := e.get(t); r.State != driver.StateInProgress || r.Token != c.Record.Token {
			t.Fatalf("record = %+v, want the claim as it was", r)
		}
	}},
}

// FinishToWaiting checks a finish to WAITING on s, given the claimed record
// (written whole, the Guard's way) and not (in place, a lease built by
// hand): it sets the not-before, the status and detail, and the generation
// and history when given (Generation 0 and a nil History keep the
// record's, an empty History clears it), and a retry of the wait that
// landed (an SDK retry after a lost answer) is nil. then, if not nil,
// checks what the store keeps of the waiting key beside the record.
func FinishToWaiting(t *testing.T, s driver.Store, then func(t *testing.T, key string)) {
	t.Helper()
	ctx := t.Context()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, whole := range []bool{true, false} {
		for _, tt := range []struct {
			name        string
			generation  int
			history     []string
			wantGen     int
			wantHistory []string
		}{
			{"kept", 0, nil, 2, []string{"one"}},
			{"replaced", 3, []string{"one", "two"}, 3, []string{"one", "two"}},
			{"history cleared", 0, []string{}, 2, nil},
		} {
			name := tt.name + map[bool]string{true: " whole", false: " in place"}[whole]
			t.Run(name, func(t *testing.T) {
				key := uniqueKey(t)
				claim := func(tok string, now time.Time) driver.Record {
					t.Helper()
					r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
						LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
					if err != nil || !r.Acquired || r.Reclaimed {
						t.Fatalf("claim: %+v %v", r, err)
					}
					return r.Record
				}
				first := claim("tok-1", at)
				if err := s.Finish(ctx, driver.FinishRequest{Key: key, Token: "tok-1", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
					Now: at, ExpiresAt: at.Add(time.Hour), NotBefore: at.Add(time.Second), Generation: 2, History: []string{"one"}, Claimed: &first}); err != nil {
					t.Fatal(err)
				}
				resumed := claim("tok-2", at.Add(time.Second)) // resumed: not reclaimed
				nb := at.Add(time.Hour)
				req := driver.FinishRequest{Key: key, Token: "tok-2", State: driver.StateWaiting, Status: "OUTSIDE_WINDOW", Detail: "until 06:00",
					Now: at.Add(time.Second), ExpiresAt: nb.Add(time.Hour), NotBefore: nb, Generation: tt.generation, History: tt.history}
				if whole {
					req.Claimed = &resumed
				}
				if err := s.Finish(ctx, req); err != nil {
					t.Fatal(err)
				}
				rec, err := s.Get(ctx, key, req.Now)
				if err != nil || rec.State != driver.StateWaiting || !rec.LeaseUntil.Equal(nb) || rec.Status != "OUTSIDE_WINDOW" || rec.Detail != "until 06:00" ||
					rec.Generation != tt.wantGen || !slices.Equal(rec.History, tt.wantHistory) || rec.Attempt != 2 || rec.Fingerprint != "fp" {
					t.Fatalf("record %+v (%v), want WAITING until %v, the status, generation %d, history %q, attempt 2", rec, err, nb, tt.wantGen, tt.wantHistory)
				}
				if then != nil {
					then(t, key)
				}
				if err := s.Finish(ctx, req); err != nil {
					t.Fatalf("the retry of a wait that landed: %v", err)
				}
			})
		}
	}
}
