package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

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
