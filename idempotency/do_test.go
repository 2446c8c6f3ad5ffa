package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

func doGuard(t *testing.T) (*idempotency.Guard, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	return g, clock
}

func TestDoOutcomes(t *testing.T) {
	ok := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "OK", Detail: "d"}, nil
	}
	tests := []struct {
		name    string
		work    func(context.Context, idempotency.Run) (idempotency.Done, error)
		wantErr error
		state   idempotency.State
		live    bool // lease still held afterwards
	}{
		{"success records DONE", ok, nil, idempotency.StateDone, false},
		{"permanent error records FAILED", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, fmt.Errorf("declined: %w", idempotency.ErrPermanent)
		}, idempotency.ErrFailed, idempotency.StateFailed, false},
		{"ambiguous error keeps the lease", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, errors.New("timeout")
		}, nil, idempotency.StateInProgress, true},
		{"not started gives the lease up", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, fmt.Errorf("connection refused: %w", idempotency.ErrNotStarted)
		}, nil, idempotency.StateInProgress, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := doGuard(t)
			res, err := g.Do(t.Context(), "K", "fp", tt.work, idempotency.DoOptions{})
			var retry *idempotency.RetryError
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && tt.state == idempotency.StateInProgress && !errors.As(err, &retry):
				t.Fatalf("err = %v, want a *RetryError", err)
			case tt.wantErr == nil && tt.state == idempotency.StateDone && (err != nil || res.Outcome != idempotency.Acquired || res.Done.Detail != "d"):
				t.Fatalf("res %+v err %v", res, err)
			}
			rec, gerr := g.Get(t.Context(), "K")
			if gerr != nil || rec.State != tt.state || rec.LeaseLive(g.Now()) != tt.live {
				t.Fatalf("record %+v (%v), want state %s live %v", rec, gerr, tt.state, tt.live)
			}
			if retry != nil && tt.live && retry.RetryAfter != time.Minute {
				t.Fatalf("RetryAfter %s, want the rest of the lease", retry.RetryAfter)
			}
		})
	}
}

func TestDoHandsDuplicatesTheStoredResultAndTypedErrors(t *testing.T) {
	g, clock := doGuard(t)
	runs := 0
	work := func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
		runs++
		return idempotency.Done{Status: "OK", Detail: fmt.Sprint("run-", runs)}, nil
	}
	if _, err := g.Do(t.Context(), "K", "fp", work, idempotency.DoOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(t.Context(), "K", "fp", work, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.DuplicateDone || res.Done.Detail != "run-1" || runs != 1 {
		t.Fatalf("duplicate: %+v %v, runs %d", res, err, runs)
	}
	if _, err := g.Do(t.Context(), "K", "other", work, idempotency.DoOptions{}); !errors.Is(err, idempotency.ErrConflict) {
		t.Fatalf("another fingerprint: %v, want ErrConflict", err)
	}
	// A live claim elsewhere: busy, with how long to wait.
	if _, err := g.Claim(t.Context(), "B", "fp"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second)
	var busy *idempotency.BusyError
	if _, err := g.Do(t.Context(), "B", "fp", work, idempotency.DoOptions{}); !errors.As(err, &busy) || busy.RetryAfter != 40*time.Second {
		t.Fatalf("in progress: %v", err)
	}
	// Once the lease has passed, the work runs, told it is a reclaim.
	clock.Advance(time.Minute)
	var reclaimed bool
	res, err = g.Do(t.Context(), "B", "fp", func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
		reclaimed = run.Reclaimed
		return idempotency.Done{Status: "OK"}, nil
	}, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Reclaimed || !reclaimed || res.Attempt != 2 {
		t.Fatalf("reclaim: %+v %v reclaimed=%v", res, err, reclaimed)
	}
	// FAILED stays FAILED for later calls.
	perm := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, fmt.Errorf("no: %w", idempotency.ErrPermanent)
	}
	_, _ = g.Do(t.Context(), "F", "fp", perm, idempotency.DoOptions{})
	var failed *idempotency.FailedError
	if _, err := g.Do(t.Context(), "F", "fp", work, idempotency.DoOptions{}); !errors.As(err, &failed) || !failed.Previously {
		t.Fatalf("after FAILED: %v", err)
	}
}

func TestDoRecordsEvenWhenTheCallerGaveUp(t *testing.T) {
	g, _ := doGuard(t)
	ctx, cancel := context.WithCancel(t.Context())
	res, err := g.Do(ctx, "K", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		cancel() // the caller is shutting down, but the effect has happened
		return idempotency.Done{Status: "OK", Detail: "x"}, nil
	}, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Acquired {
		t.Fatalf("%+v %v", res, err)
	}
	if rec, err := g.Get(t.Context(), "K"); err != nil || rec.State != idempotency.StateDone {
		t.Fatalf("record %+v %v, want DONE", rec, err)
	}
}
