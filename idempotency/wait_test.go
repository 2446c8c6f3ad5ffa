package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

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
