package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
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
		name       string
		work       func(context.Context, idempotency.Run) (idempotency.Done, error)
		outcome    idempotency.Outcome
		state      driver.State
		live       bool // lease still held afterwards
		retryAfter time.Duration
	}{
		{"success records DONE", ok, idempotency.Acquired, driver.StateDone, false, 0},
		{"permanent error records FAILED", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, fmt.Errorf("declined: %w", idempotency.ErrPermanent)
		}, idempotency.Failed, driver.StateFailed, false, 0},
		{"ambiguous error keeps the lease", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, errors.New("timeout")
		}, idempotency.Unfinished, driver.StateInProgress, true, time.Minute},
		{"not started gives the lease up", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{}, fmt.Errorf("connection refused: %w", idempotency.ErrNotStarted)
		}, idempotency.Unfinished, driver.StateInProgress, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := doGuard(t)
			res, err := g.Do(t.Context(), "K", "fp", tt.work, idempotency.DoOptions{})
			if err != nil || res.Outcome != tt.outcome || res.Attempt != 1 || res.RetryAfter != tt.retryAfter {
				t.Fatalf("Do = %+v, %v; want outcome %v, retry after %s, no error", res, err, tt.outcome, tt.retryAfter)
			}
			if (tt.outcome == idempotency.Acquired) != (res.Err == nil) {
				t.Fatalf("the work's error %v for outcome %v", res.Err, res.Outcome)
			}
			if tt.outcome == idempotency.Acquired && res.Done.Detail != "d" {
				t.Fatalf("Done = %+v", res.Done)
			}
			rec, gerr := g.Get(t.Context(), "K")
			if gerr != nil || rec.State != tt.state || rec.LeaseLive(g.Now()) != tt.live {
				t.Fatalf("record %+v (%v), want state %s live %v", rec, gerr, tt.state, tt.live)
			}
		})
	}
}

// Every outcome of a claim comes back as data, never as an error: the
// error is kept for a store that could not be reached.
func TestDoReturnsEveryClaimOutcomeAsData(t *testing.T) {
	g, clock := doGuard(t)
	runs := 0
	work := func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
		runs++
		return idempotency.Done{Status: "OK", Detail: fmt.Sprint("run-", runs)}, nil
	}
	// The outcomes where the work did not run and no stored result came
	// back are also an error (NotRunError), with their sentinel.
	notRun := map[idempotency.Outcome]error{idempotency.Conflict: idempotency.ErrConflict,
		idempotency.DuplicateInProgress: idempotency.ErrInProgress, idempotency.DuplicateFailed: idempotency.ErrAlreadyFailed}
	do := func(key, fp string, want idempotency.Outcome) idempotency.DoResult {
		t.Helper()
		res, err := g.Do(t.Context(), key, fp, work, idempotency.DoOptions{})
		var nr *idempotency.NotRunError
		switch sentinel := notRun[want]; {
		case res.Outcome != want:
			t.Fatalf("Do(%s, %s) = %+v, %v; want %v", key, fp, res, err, want)
		case sentinel == nil && err != nil:
			t.Fatalf("Do(%s, %s) = %v, %v; want no error", key, fp, res.Outcome, err)
		case sentinel != nil && (!errors.Is(err, sentinel) || !errors.As(err, &nr) || nr.Outcome != want || nr.RetryAfter != res.RetryAfter || nr.Record.Key != key):
			t.Fatalf("Do(%s, %s) = %v, %v; want a NotRunError wrapping %v with the result's retry-after and record", key, fp, res.Outcome, err, sentinel)
		}
		return res
	}
	do("K", "fp", idempotency.Acquired)
	if res := do("K", "fp", idempotency.DuplicateDone); res.Done.Detail != "run-1" || runs != 1 {
		t.Fatalf("duplicate: %+v, runs %d", res, runs)
	}
	if res := do("K", "other", idempotency.Conflict); res.Record.Fingerprint != "fp" || runs != 1 {
		t.Fatalf("conflict: %+v, runs %d", res, runs)
	}
	// A live claim elsewhere: busy, with how long to wait.
	if _, err := g.Claim(t.Context(), "B", "fp"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second)
	if res := do("B", "fp", idempotency.DuplicateInProgress); res.RetryAfter != 40*time.Second || res.Record.Attempt != 1 {
		t.Fatalf("in progress: %+v", res)
	}
	// Once the lease has passed, the work runs, told it is a reclaim.
	clock.Advance(time.Minute)
	var reclaimed bool
	res, err := g.Do(t.Context(), "B", "fp", func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
		reclaimed = run.Reclaimed
		return idempotency.Done{Status: "OK"}, nil
	}, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Reclaimed || !reclaimed || res.Attempt != 2 {
		t.Fatalf("reclaim: %+v %v reclaimed=%v", res, err, reclaimed)
	}
	// FAILED stays FAILED for later calls.
	_, _ = g.Do(t.Context(), "F", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, fmt.Errorf("no: %w", idempotency.ErrPermanent)
	}, idempotency.DoOptions{})
	if res := do("F", "fp", idempotency.DuplicateFailed); res.Record.Detail != "no: idempotency: permanent failure" {
		t.Fatalf("after FAILED: %+v", res)
	}
	if runs != 1 {
		t.Fatalf("the work ran %d times, want 1", runs)
	}
}

// A claim taken over while the work runs is LeaseLost: the work's context
// is cancelled and nothing is written over the new owner's claim.
func TestDoLeaseLostWhileTheWorkRuns(t *testing.T) {
	g, clock := doGuard(t)
	hb := &manualBeat{}
	res, err := g.Do(t.Context(), "K", "fp", func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
		clock.Advance(2 * time.Minute) // the lease passes, another worker takes the key
		if c, err := g.Claim(t.Context(), "K", "fp"); err != nil || c.Outcome != idempotency.Reclaimed {
			t.Errorf("the other worker's claim: %+v %v", c, err)
		}
		hb.beat(t.Context()) // our heartbeat finds the lease gone and cancels the work
		<-ctx.Done()
		return idempotency.Done{Status: "OK"}, nil
	}, idempotency.DoOptions{Heartbeat: hb})
	if err != nil || res.Outcome != idempotency.LeaseLost || !errors.Is(res.Err, idempotency.ErrLeaseLost) {
		t.Fatalf("Do = %+v, %v; want LeaseLost", res, err)
	}
	if rec, _ := g.Get(t.Context(), "K"); rec.State != driver.StateInProgress || rec.Attempt != 2 {
		t.Fatalf("the new owner's record was touched: %+v", rec)
	}
}

// manualBeat is a Heartbeat whose beats the test fires.
type manualBeat struct{ fns []func(context.Context) error }

func (m *manualBeat) Register(f func(context.Context) error) func() {
	m.fns = append(m.fns, f)
	return func() {}
}

func (m *manualBeat) beat(ctx context.Context) {
	for _, f := range m.fns {
		_ = f(ctx)
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
	if rec, err := g.Get(t.Context(), "K"); err != nil || rec.State != driver.StateDone {
		t.Fatalf("record %+v %v, want DONE", rec, err)
	}
}

// DoOptions.Namespace keeps two callers of one store apart for Do as for
// DoTyped: the same key in two namespaces runs twice, once in each.
func TestDoNamespacesKeepCallersApart(t *testing.T) {
	g, _ := doGuard(t)
	runs := 0
	work := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		runs++
		return idempotency.Done{Status: "OK"}, nil
	}
	for _, ns := range []string{"signup", "payments", "payments"} {
		if _, err := g.Do(t.Context(), "K-1", "fp", work, idempotency.DoOptions{Namespace: ns}); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("the work ran %d times for one key in two namespaces (one twice), want 2", runs)
	}
	if r, err := g.Get(t.Context(), "payments:K-1"); err != nil || r.State != driver.StateDone {
		t.Fatalf("the record under payments:K-1 = %+v, %v; want DONE", r, err)
	}
	if _, err := g.Do(t.Context(), "K-1", "fp", work, idempotency.DoOptions{Namespace: "a:b"}); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("a namespace holding the separator: err = %v, want ErrInvalid", err)
	}
}

// noted is a permanent failure with a history note.
type noted struct{ note string }

func (n noted) Error() string       { return "declined for good" }
func (n noted) Unwrap() error       { return idempotency.ErrPermanent }
func (n noted) HistoryNote() string { return n.note }

// A run that waits is recorded WAITING until its time, refused before it,
// resumed after it (not reclaimed, one attempt more, the next generation,
// the notes in its history), and its notes end on the final record.
func TestWaitRunsTheWorkAgainAtItsTime(t *testing.T) {
	g, clock := doGuard(t)
	ctx := t.Context()
	var runs []idempotency.Run
	step := 0
	work := func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
		runs = append(runs, run)
		step++
		switch step {
		case 1:
			return idempotency.Done{}, &idempotency.Wait{Until: clock.Now().Add(24 * time.Hour), Status: "RETRY_SCHEDULED",
				Detail: "after INSUFFICIENT_FUNDS", NextGeneration: true, Note: "generation 1: declined INSUFFICIENT_FUNDS"}
		case 2:
			return idempotency.Done{}, noted{"generation 2: declined, retries exhausted"}
		}
		return idempotency.Done{Status: "DEBITED", Detail: "CBS1", Note: "generation 2: debited"}, nil
	}
	res, err := g.Do(ctx, "K", "fp", work, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Waiting || !res.NotBefore.Equal(clock.Now().Add(24*time.Hour)) || res.RetryAfter != 24*time.Hour ||
		res.Done.Status != "RETRY_SCHEDULED" {
		t.Fatalf("Do = %+v, %v; want Waiting for 24h with its status", res, err)
	}
	rec, _ := g.Get(ctx, "K")
	if rec.State != driver.StateWaiting || rec.Generation != 2 || len(rec.History) != 1 || !rec.ExpiresAt.After(rec.LeaseUntil) {
		t.Fatalf("record %+v, want WAITING under generation 2 with one history line, kept past its not-before", rec)
	}

	clock.Advance(23 * time.Hour)
	res, err = g.Do(ctx, "K", "fp", work, idempotency.DoOptions{})
	var nr *idempotency.NotRunError
	if !errors.Is(err, idempotency.ErrWaiting) || !errors.As(err, &nr) || nr.RetryAfter != time.Hour ||
		res.Outcome != idempotency.Waiting || res.RetryAfter != time.Hour || len(runs) != 1 {
		t.Fatalf("a delivery before the time: %+v, %v (runs %d); want Waiting an hour more, the work not run", res, err, len(runs))
	}
	if res, _ := g.Do(ctx, "K", "another-fp", work, idempotency.DoOptions{}); res.Outcome != idempotency.Conflict {
		t.Fatalf("another payload under a waiting key: %v, want conflict", res.Outcome)
	}

	clock.Advance(time.Hour)
	res, err = g.Do(ctx, "K", "fp", work, idempotency.DoOptions{})
	if err != nil || res.Outcome != idempotency.Failed || res.Attempt != 2 {
		t.Fatalf("the resumed run: %+v, %v; want Failed on attempt 2", res, err)
	}
	if r := runs[1]; r.Reclaimed || r.Generation != 2 || len(r.History) != 1 || r.History[0] != "generation 1: declined INSUFFICIENT_FUNDS" {
		t.Fatalf("the resumed run was told %+v; want not reclaimed, generation 2, the first note", r)
	}
	rec, _ = g.Get(ctx, "K")
	if rec.State != driver.StateFailed || len(rec.History) != 2 || rec.History[1] != "generation 2: declined, retries exhausted" {
		t.Fatalf("final record %+v, want FAILED with both notes", rec)
	}
}

func TestDoneNoteIsTheLastHistoryLine(t *testing.T) {
	g, clock := doGuard(t)
	first := true
	work := func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
		if first {
			first = false
			return idempotency.Done{}, &idempotency.Wait{Until: clock.Now().Add(time.Hour), Status: "NOTICE_SENT", Note: "notice sent"}
		}
		return idempotency.Done{Status: "DEBITED", Detail: "CBS1", Note: fmt.Sprintf("generation %d: debited", run.Generation)}, nil
	}
	if res, err := g.Do(t.Context(), "K", "fp", work, idempotency.DoOptions{}); err != nil || res.Outcome != idempotency.Waiting {
		t.Fatalf("Do = %+v, %v", res, err)
	}
	clock.Advance(time.Hour)
	if res, err := g.Do(t.Context(), "K", "fp", work, idempotency.DoOptions{}); err != nil || res.Outcome != idempotency.Acquired {
		t.Fatalf("Do = %+v, %v; want the resumed run acquired", res, err)
	}
	rec, _ := g.Get(t.Context(), "K")
	if rec.State != driver.StateDone || rec.Generation != 1 || len(rec.History) != 2 || rec.History[1] != "generation 1: debited" {
		t.Fatalf("record %+v, want DONE, generation 1, two lines", rec)
	}
}

func TestWaitWithoutATimeIsInvalid(t *testing.T) {
	g, _ := doGuard(t)
	res, err := g.Do(t.Context(), "K", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, &idempotency.Wait{Status: "X"}
	}, idempotency.DoOptions{})
	if !errors.Is(err, idempotency.ErrInvalid) || res.Outcome != idempotency.Unfinished {
		t.Fatalf("Do = %+v, %v; want Unfinished and ErrInvalid", res, err)
	}
	if rec, _ := g.Get(t.Context(), "K"); rec.State != driver.StateInProgress || rec.LeaseUntil.After(g.Now()) {
		t.Fatalf("record %+v, want the lease given up", rec)
	}
}
