package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// Attack 54 (issue 54 item 3): Do and DoTyped return a *NotRunError when
// the work did not run and no stored result came back. The outcomes where
// the work ran (Unfinished, Failed, LeaseLost, a Waiting it returned) must
// not: a caller that reads the error as "not run, retry later" would run
// or ack on a wrong belief.

// handleAsDocumented is the handling of docs/library/index.md ("Handling
// what comes back"), case for case. Before attack 54 its last case let
// LeaseLost and a Waiting the work returned fall through to the ack: a
// taken-over run acked on a guess, and a scheduled wait's message acked
// (nothing left to bring the key back at its time); and a value not stored
// (ErrResultNotStored: the work ran, DONE) went to "do not ack", so its
// message came back for ever, every delivery told the same.
func handleAsDocumented(res idempotency.TypedResult[string], err error) string {
	var notRun *idempotency.NotRunError
	switch {
	case errors.Is(err, idempotency.ErrInProgress), errors.Is(err, idempotency.ErrWaiting):
		errors.As(err, &notRun)
		return "retry"
	case errors.Is(err, idempotency.ErrConflict), errors.Is(err, idempotency.ErrAlreadyFailed):
		return "dead-letter"
	case errors.Is(err, idempotency.ErrResultNotStored), errors.Is(err, idempotency.ErrResultUnreadable):
		return "dead-letter"
	case err != nil:
		return "error"
	case res.Outcome == idempotency.Failed:
		return "dead-letter"
	case !res.Outcome.Owned() && res.Outcome != idempotency.DuplicateDone: // Unfinished, LeaseLost, Waiting
		return "retry"
	}
	return "ack"
}

func TestAttack54WorkThatRanIsNoNotRunError(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(storetest.Epoch)
	store := memstore.New()
	g, err := idempotency.NewGuard(store, idempotency.Options{Lease: time.Second, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	works := map[string]func(context.Context, idempotency.Run) (string, error){
		"unfinished": func(context.Context, idempotency.Run) (string, error) { return "", errors.New("timeout") },
		"not started": func(context.Context, idempotency.Run) (string, error) {
			return "", fmt.Errorf("%w: refused", idempotency.ErrNotStarted)
		},
		"failed": func(context.Context, idempotency.Run) (string, error) {
			return "", fmt.Errorf("%w: declined", idempotency.ErrPermanent)
		},
		"waiting": func(context.Context, idempotency.Run) (string, error) {
			return "", &idempotency.Wait{Until: clock.Now().Add(time.Hour), Status: "LATER"}
		},
		"lease lost": func(ctx context.Context, run idempotency.Run) (string, error) {
			// Frozen past the lease; another worker takes the key over and
			// finishes it before this one records.
			clock.Advance(2 * time.Second)
			other, err := idempotency.DoTyped(ctx, g, strings.TrimPrefix(run.Lease.Key, "ns:"), "fp", func(context.Context, idempotency.Run) (string, error) {
				return "theirs", nil
			}, idempotency.DoOptions{Namespace: "ns"})
			if err != nil || other.Outcome != idempotency.Reclaimed {
				return "", fmt.Errorf("the takeover: %v %v", other.Outcome, err)
			}
			return "mine", nil
		},
	}
	want := map[string]idempotency.Outcome{"unfinished": idempotency.Unfinished, "not started": idempotency.Unfinished,
		"failed": idempotency.Failed, "waiting": idempotency.Waiting, "lease lost": idempotency.LeaseLost}
	handled := map[string]string{"unfinished": "retry", "not started": "retry", "failed": "dead-letter", "waiting": "retry", "lease lost": "retry"}
	for name, work := range works {
		res, err := idempotency.DoTyped(ctx, g, "K-"+name, "fp", work, idempotency.DoOptions{Namespace: "ns"})
		var nr *idempotency.NotRunError
		if res.Outcome != want[name] || errors.As(err, &nr) || err != nil {
			t.Errorf("%s: %v, %v; want %v and no error (the work ran)", name, res.Outcome, err, want[name])
		}
		if got := handleAsDocumented(res, err); got != handled[name] {
			t.Errorf("%s: the documented handling does %s, want %s", name, got, handled[name])
		}
		// Do, the same work as a Done.
		dres, derr := g.Do(ctx, "D-"+name, "fp", func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
			if name == "lease lost" {
				clock.Advance(2 * time.Second)
				if _, err := g.Do(ctx, run.Lease.Key, "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
					return idempotency.Done{Status: "THEIRS"}, nil
				}, idempotency.DoOptions{}); err != nil {
					return idempotency.Done{}, err
				}
				return idempotency.Done{Status: "MINE"}, nil
			}
			_, err := work(ctx, run)
			return idempotency.Done{}, err
		}, idempotency.DoOptions{})
		if dres.Outcome != want[name] || errors.As(derr, &nr) || derr != nil {
			t.Errorf("Do %s: %v, %v; want %v and no error (the work ran)", name, dres.Outcome, derr, want[name])
		}
	}
	// And the ones where it did not run, through the same handling.
	if res, err := idempotency.DoTyped(ctx, g, "K-held", "fp", works["unfinished"], idempotency.DoOptions{Namespace: "ns"}); err != nil || res.Outcome != idempotency.Unfinished {
		t.Fatalf("K-held: %v %v", res.Outcome, err)
	}
	for _, tt := range []struct {
		name, key, fp string
		want          string
	}{
		{"in progress (an unfinished run's lease kept)", "K-held", "fp", "retry"},
		{"waiting from before", "K-waiting", "fp", "retry"},
		{"failed before", "K-failed", "fp", "dead-letter"},
		{"conflict", "K-failed", "other", "dead-letter"},
	} {
		res, err := idempotency.DoTyped(ctx, g, tt.key, tt.fp, works["unfinished"], idempotency.DoOptions{Namespace: "ns"})
		var nr *idempotency.NotRunError
		if !errors.As(err, &nr) || nr.Outcome != res.Outcome || nr.Record.Key != "ns:"+tt.key {
			t.Errorf("%s: %v, %v; want a NotRunError of the outcome and record", tt.name, res.Outcome, err)
		}
		if got := handleAsDocumented(res, err); got != tt.want {
			t.Errorf("%s: the documented handling does %s, want %s", tt.name, got, tt.want)
		}
	}
}

// bound is a queue's claim made at receive (DoOptions.Bound) that found
// the key held by another worker.
type bound struct {
	req   driver.ClaimRequest
	res   driver.ClaimResult
	taken bool
}

func (b *bound) Claimed() (driver.ClaimRequest, driver.ClaimResult, bool) {
	if b.taken {
		return driver.ClaimRequest{}, driver.ClaimResult{}, false
	}
	b.taken = true
	return b.req, b.res, true
}
func (b *bound) Finish(context.Context, driver.FinishRequest) error { return errors.New("not owned") }
func (b *bound) Settled() bool                                      { return false }
func (b *bound) Release(context.Context) error                      { return nil }

// The queue-claimed path: the receive's claim found the key in progress
// elsewhere; Do takes that claim and says so as a NotRunError, with the
// rest of the other's lease, and the work does not run.
func TestAttack54BoundInProgressIsNotRun(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := &bound{
		req: driver.ClaimRequest{Key: "K", Fingerprint: "fp", Token: "mine"},
		res: driver.ClaimResult{Record: driver.Record{Key: "K", Fingerprint: "fp", Token: "theirs", State: driver.StateInProgress,
			Attempt: 1, LeaseUntil: clock.Now().Add(40 * time.Second)}},
	}
	ran := false
	res, err := g.Do(context.Background(), "K", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		ran = true
		return idempotency.Done{}, nil
	}, idempotency.DoOptions{Bound: b})
	var nr *idempotency.NotRunError
	if ran || res.Outcome != idempotency.DuplicateInProgress || !errors.Is(err, idempotency.ErrInProgress) || !errors.As(err, &nr) ||
		nr.RetryAfter != 40*time.Second || nr.Record.Token != "theirs" {
		t.Fatalf("Do on a receive's claim held elsewhere: ran %v, %v, %v; want DuplicateInProgress, a NotRunError with 40s", ran, res.Outcome, err)
	}
}

// A NotRunError made by hand (a test double, a mock of a guard) with no
// record, or no outcome of its own, still says what it is: no "(key )",
// no "<nil>".
func TestAttack54NotRunErrorText(t *testing.T) {
	for _, tt := range []struct {
		err  *idempotency.NotRunError
		want string
	}{
		{&idempotency.NotRunError{Outcome: idempotency.DuplicateInProgress}, "idempotency: another worker holds the key"},
		{&idempotency.NotRunError{Outcome: idempotency.Conflict, Record: driver.Record{Key: "K"}}, "idempotency: the key was used with another payload (key K)"},
		{&idempotency.NotRunError{Outcome: idempotency.DuplicateInProgress, RetryAfter: 1500 * time.Millisecond, Record: driver.Record{Key: "K"}},
			"idempotency: another worker holds the key (key K; retry after 1.5s)"},
		{&idempotency.NotRunError{}, "idempotency: the work did not run (outcome " + idempotency.Outcome(0).String() + ")"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	var nr *idempotency.NotRunError
	if errors.As(nil, &nr) || errors.Is(&idempotency.NotRunError{}, idempotency.ErrInProgress) {
		t.Error("a nil error or an outcome-less NotRunError matched")
	}
}

// The handling above is the documented one: docs/library/index.md's
// snippet has its cases for a run not finished (do not ack) and for a value
// that will never come back (dead-letter, not retry).
func TestAttack54DocumentedHandlingDoesNotAckARunNotFinished(t *testing.T) {
	b, err := os.ReadFile("../docs/library/index.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		"case !res.Outcome.Owned() && res.Outcome != idempotency.DuplicateDone: // Unfinished, LeaseLost, Waiting\n\treturn retryAfter(",
		"case errors.Is(err, idempotency.ErrResultNotStored), errors.Is(err, idempotency.ErrResultUnreadable):\n\treturn deadLetter(",
	} {
		if !strings.Contains(string(b), c) {
			t.Errorf("docs/library/index.md's handling lacks %q", c)
		}
	}
}

// A value too large to store: the work ran once, DONE is recorded, and
// every delivery after is told ErrResultNotStored. The documented handling
// dead-letters it; "do not ack" would bring the message back for ever.
func TestAttack54ResultNotStoredIsNotRetriedForEver(t *testing.T) {
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	work := func(context.Context, idempotency.Run) (string, error) {
		runs++
		return strings.Repeat("x", driver.MaxResultBytes+1), nil
	}
	for delivery := 1; delivery <= 3; delivery++ {
		res, err := idempotency.DoTyped(context.Background(), g, "BIG", "fp", work, idempotency.DoOptions{})
		if !errors.Is(err, idempotency.ErrResultNotStored) {
			t.Fatalf("delivery %d: %v, %v; want ErrResultNotStored", delivery, res.Outcome, err)
		}
		if got := handleAsDocumented(res, err); got != "dead-letter" {
			t.Fatalf("delivery %d (%v): the documented handling does %s, want dead-letter (the work ran; a retry is told the same)", delivery, res.Outcome, got)
		}
	}
	if runs != 1 {
		t.Fatalf("the work ran %d times, want once", runs)
	}
}

func TestNewGuardChecksOptions(t *testing.T) {
	s := memstore.New()
	for name, o := range map[string]idempotency.Options{
		"negative lease":            {Lease: -time.Second},
		"negative retention":        {Retention: -time.Second},
		"retention below the lease": {Lease: time.Hour, Retention: time.Minute},
	} {
		if _, err := idempotency.NewGuard(s, o); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := idempotency.NewGuard(nil, idempotency.Options{}); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil store: err = %v", err)
	}
	g, err := idempotency.NewGuard(s, idempotency.Options{})
	if err != nil || g.Lease() != idempotency.DefaultLease {
		t.Fatalf("defaults: %v, lease %v", err, g.Lease())
	}
}

func TestClaimRefusesAnEmptyKey(t *testing.T) {
	g, _ := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if _, err := g.Claim(t.Context(), "", "fp"); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

// What a store's answer to a claim amounts to (ClaimOf, as Guard.Claim
// returns it).
func TestClaimOf(t *testing.T) {
	rec := func(s driver.State, fp string) driver.Record {
		return driver.Record{State: s, Fingerprint: fp, Token: "theirs", Attempt: 1}
	}
	ours := func(s driver.State, attempt int) driver.Record {
		return driver.Record{State: s, Fingerprint: "a", Token: "ours", Attempt: attempt}
	}
	tests := []struct {
		name string
		res  driver.ClaimResult
		want idempotency.Outcome
	}{
		{"fresh", driver.ClaimResult{Acquired: true}, idempotency.Acquired},
		{"reclaim", driver.ClaimResult{Acquired: true, Reclaimed: true}, idempotency.Reclaimed},
		{"done", driver.ClaimResult{Record: rec(driver.StateDone, "a")}, idempotency.DuplicateDone},
		{"failed", driver.ClaimResult{Record: rec(driver.StateFailed, "a")}, idempotency.DuplicateFailed},
		{"in progress", driver.ClaimResult{Record: rec(driver.StateInProgress, "a")}, idempotency.DuplicateInProgress},
		{"conflict beats done", driver.ClaimResult{Record: rec(driver.StateDone, "b")}, idempotency.Conflict},
		{"conflict beats in progress", driver.ClaimResult{Record: rec(driver.StateInProgress, "b")}, idempotency.Conflict},
		// A retried write whose first attempt landed finds our own record.
		{"our own claim landed", driver.ClaimResult{Record: ours(driver.StateInProgress, 1)}, idempotency.Acquired},
		{"our own reclaim landed", driver.ClaimResult{Record: ours(driver.StateInProgress, 3)}, idempotency.Reclaimed},
		{"our token but finished is not ours to work", driver.ClaimResult{Record: ours(driver.StateDone, 1)}, idempotency.DuplicateDone},
	}
	for _, tt := range tests {
		req := driver.ClaimRequest{Key: "K", Token: "ours", Fingerprint: "a"}
		if got := idempotency.ClaimOf(req, tt.res).Outcome; got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestFingerprintIsUnambiguous(t *testing.T) {
	if idempotency.Fingerprint("ab", "c") == idempotency.Fingerprint("a", "bc") {
		t.Fatal("part boundaries are not part of the fingerprint")
	}
	// Stable across versions: a fingerprint stored by an earlier release
	// must still match its redelivery, or every redelivery would be a
	// Conflict. SHA-256 over each part's 8-byte big-endian length and bytes.
	if got, want := idempotency.Fingerprint("x"), "028f0df5b8596fbcd10c9720b7a4784f8e7e04f629bd5a62bfbdf139678b6624"; got != want {
		t.Fatalf("Fingerprint(\"x\") = %s, want %s: the fingerprint changed, and stored records would no longer match", got, want)
	}
}

// The default fencing tokens are 128 random bits in hex: every claim gets
// its own.
func TestRandomTokensDiffer(t *testing.T) {
	g, _ := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	seen := map[string]bool{}
	for i := range 1000 {
		c, err := g.Claim(t.Context(), fmt.Sprint("K", i), "fp")
		tok := c.Record.Token
		if err != nil || c.Outcome != idempotency.Acquired || len(tok) != 32 || seen[tok] {
			t.Fatalf("claim %d: token %q outcome %v err %v (seen before: %v)", i, tok, c.Outcome, err, seen[tok])
		}
		seen[tok] = true
	}
}

// Whatever the work returns, the record stays small enough for every
// store's item limit: a 300 KB detail (past DynamoDB's 400 KB item with
// the history) would make a record that can never be finished.
func TestARecordsDetailIsBounded(t *testing.T) {
	s := memstore.New()
	g, _ := idempotency.NewGuard(s, idempotency.Options{})
	huge := strings.Repeat("ü", 150_000)
	_, err := g.Do(t.Context(), "K", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "OK", Detail: huge}, nil
	}, idempotency.DoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := g.Get(t.Context(), "K")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != driver.StateDone || len(rec.Detail) > driver.MaxDetailBytes || !utf8.ValidString(rec.Detail) || !strings.HasPrefix(huge, strings.TrimSuffix(rec.Detail, "…")) {
		t.Errorf("record %s with a %d-byte detail, want DONE with at most %d bytes cut on a rune", rec.State, len(rec.Detail), driver.MaxDetailBytes)
	}
}
