package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Transitions runs every row of driver.Transitions as a case on the store:
// the record is brought to the row's state and condition, the row's
// operation is sent to the store itself (not through a Guard), and the
// answer and the record afterwards must be the row's.
func Transitions(t *testing.T, newStore func(t *testing.T) driver.Store) {
	t.Helper()
	for _, row := range driver.Transitions {
		t.Run(rowName(row), func(t *testing.T) {
			s := newStore(t)
			clock := NewClock(Epoch)
			g, err := idempotency.NewGuard(s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: clock, SkewMargin: -1})
			if err != nil {
				t.Fatalf("NewGuard: %v", err)
			}
			runRow(t, &env{g: g, s: s, clock: clock, key: uniqueKey(t)}, row)
		})
	}
}

func rowName(r driver.Transition) string {
	name := r.From.String() + " " + string(r.Op) + " " + string(r.When)
	return strings.NewReplacer(" ", "_", ",", "").Replace(name)
}

// runRow sets the row up, performs its operation and checks the outcome.
func runRow(t *testing.T, e *env, row driver.Transition) {
	ctx := t.Context()
	// The state the row starts from, under the token a claim gave it.
	var before driver.Record
	if row.From != driver.StateAbsent {
		c := e.claim(t, fpA, idempotency.Acquired)
		switch row.From {
		case driver.StateDone:
			if err := e.g.Complete(ctx, c.Lease(), "DEBITED_NOTIFICATION_FAILED", "CBS1"); err != nil {
				t.Fatal(err)
			}
		case driver.StateFailed:
			if err := e.g.Fail(ctx, c.Lease(), "FAILED", "declined"); err != nil {
				t.Fatal(err)
			}
		case driver.StateWaiting:
			// Waiting one lease from now, under the next generation, with
			// one history line: what the claim that resumes it keeps.
			now := e.clock.Now()
			if err := e.s.Finish(ctx, driver.FinishRequest{Key: e.key, Token: c.Record.Token, State: driver.StateWaiting,
				Status: "RETRY_SCHEDULED", Detail: "after INSUFFICIENT_FUNDS", Now: now, ExpiresAt: now.Add(Lease + Retention),
				NotBefore: now.Add(Lease), Generation: 2, History: []string{"generation 1: declined"}}); err != nil {
				t.Fatal(err)
			}
		}
		before = e.get(t)
	}
	token, fp := before.Token, fpA
	switch row.When {
	case driver.PastRetention:
		e.clock.Advance(Retention + Lease)
	case driver.LeasePassed, driver.Due:
		e.clock.Advance(Lease)
	case driver.LeaseLive, driver.NotDue:
		e.clock.Advance(Lease - time.Millisecond)
	case driver.OtherFingerprint:
		e.clock.Advance(Lease)
		fp = fpB
	case driver.OtherToken:
		token = "not-the-records-token"
	case driver.OwnToken, driver.OtherGeneration, driver.OtherState, driver.Collected:
		if row.Op == driver.OpCollect && before.State == driver.StateInProgress {
			e.clock.Advance(Lease) // a collect never takes a live lease
		}
	case driver.Always:
		if token == "" {
			token = "some-token"
		}
	}
	now := e.clock.Now()
	fresh := "token-of-" + string(row.Op)
	var err error
	switch row.Op {
	case driver.OpClaim:
		var res driver.ClaimResult
		res, err = e.s.Claim(ctx, driver.ClaimRequest{Key: e.key, Token: fresh, Fingerprint: fp, Now: now,
			LeaseExpiredBy: now, LeaseUntil: now.Add(Lease), ExpiresAt: now.Add(Retention)})
		if err == nil && (res.Acquired != row.Writes || res.Reclaimed != (row.When == driver.LeasePassed)) {
			t.Fatalf("Claim: acquired %v reclaimed %v, want acquired %v (%s)", res.Acquired, res.Reclaimed, row.Writes, row.Answer)
		}
		if err == nil && row.When == driver.Due {
			// A resume carries the generation and the history on, one attempt more.
			if r := res.Record; r.Attempt != before.Attempt+1 || r.Generation != 2 || len(r.History) != 1 || r.Status != "" || !r.CreatedAt.Equal(before.CreatedAt) {
				t.Fatalf("a resumed record is %+v, want attempt %d, generation 2, the history line, no status, the first CreatedAt", r, before.Attempt+1)
			}
		}
		if err == nil && row.When == driver.NotDue && res.Record.State != driver.StateWaiting {
			t.Fatalf("a refused Claim of a waiting key returned %+v, want the WAITING record", res.Record)
		}
		if err == nil && !res.Acquired && res.Record.Token != before.Token {
			t.Fatalf("a refused Claim returned %+v, want the existing record", res.Record)
		}
	case driver.OpExtend:
		err = e.s.Extend(ctx, driver.ExtendRequest{Key: e.key, Token: token, LeaseUntil: now.Add(Lease), Now: now})
	case driver.OpComplete, driver.OpFail:
		state := driver.StateDone
		if row.Op == driver.OpFail {
			state = driver.StateFailed
		}
		err = e.s.Finish(ctx, driver.FinishRequest{Key: e.key, Token: token, State: state, Status: "FINISHED", Detail: "by the row",
			Now: now, ExpiresAt: now.Add(Retention)})
	case driver.OpWait:
		req := driver.FinishRequest{Key: e.key, Token: token, State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Detail: "by the row",
			Now: now, ExpiresAt: now.Add(2*Lease + Retention), NotBefore: now.Add(2 * Lease), Generation: 3, History: []string{"one", "two"}}
		if row.From == driver.StateWaiting {
			// The retry of the very wait that landed: the same request.
			req = driver.FinishRequest{Key: e.key, Token: token, State: driver.StateWaiting, Status: before.Status, Detail: before.Detail,
				Now: before.UpdatedAt, ExpiresAt: before.ExpiresAt, NotBefore: before.LeaseUntil, Generation: 2, History: before.History}
		}
		err = e.s.Finish(ctx, req)
		if err == nil && row.Writes {
			w := e.get(t)
			if !w.LeaseUntil.Equal(now.Add(2*Lease)) || w.Generation != 3 || len(w.History) != 2 || w.History[1] != "two" ||
				w.Status != "RETRY_SCHEDULED" || !w.ExpiresAt.Equal(now.Add(2*Lease+Retention)) || w.Fingerprint != fpA {
				t.Fatalf("after a wait the record is %+v, want not-before %v, generation 3, two history lines, the status, the retention", w, now.Add(2*Lease))
			}
		}
	case driver.OpReopen:
		_, err = e.s.Reopen(ctx, driver.ReopenRequest{Key: e.key, Token: fresh, Reason: "row", Now: now,
			LeaseUntil: now, ExpiresAt: now.Add(Retention), PrevToken: token})
	case driver.OpAmend:
		am := capable[driver.Amender](t, e, "the store does not amend (driver.Amender is optional)")
		from := before.Status
		if row.When == driver.OtherStatus {
			from = "ANOTHER_STATUS"
		}
		_, err = am.Amend(ctx, driver.AmendRequest{Key: e.key, Token: token, FromStatus: from, Status: "DEBITED", Detail: "amended", Now: now})
	case driver.OpCollect:
		co, ok := e.s.(driver.Collector)
		if !ok {
			t.Fatalf("the store does not collect: every store implements driver.Collector")
		}
		req := driver.CollectRequest{Key: e.key, From: row.From, Token: token, Generation: before.Generation, LeaseExpiredBy: now,
			NewToken: fresh, PostedGeneration: 1, Status: "DEBITED", Detail: "collected by the row", History: []string{"generation 1: declined", "collected"},
			Now: now, ExpiresAt: now.Add(Retention)}
		switch row.When {
		case driver.OtherGeneration:
			req.Generation = before.Generation + 1
		case driver.OtherState:
			req.From = driver.StateFailed
		case driver.Collected:
			// The retry of the collect that landed: its new token is the record's.
			req.From, req.NewToken = driver.StateWaiting, before.Token
		case driver.Always:
			req.From = driver.StateFailed
		}
		if row.From == driver.StateDone && row.When == driver.OwnToken {
			req.From = driver.StateFailed // the token read, but the record is DONE now
		}
		var got driver.Record
		got, err = co.Collect(ctx, req)
		if err == nil && got.State != driver.StateDone {
			t.Fatalf("Collect returned %+v, want the DONE record", got)
		}
		if row.Err != nil && errors.Is(err, driver.ErrStale) && got.Token != before.Token {
			t.Fatalf("a refused Collect returned %+v, want the record as it is", got)
		}
		if err == nil && row.Writes {
			w := e.get(t)
			if w.Token != fresh || w.Generation != 1 || w.Status != "DEBITED" || w.Detail != "collected by the row" || len(w.History) != 2 ||
				w.History[1] != "collected" || w.Attempt != before.Attempt || w.Fingerprint != before.Fingerprint ||
				!w.CreatedAt.Equal(before.CreatedAt) || !w.ExpiresAt.Equal(now.Add(Retention)) || w.Reopens != before.Reopens {
				t.Fatalf("after a collect the record is %+v, want DONE under the new token, generation 1 (the posted), the result and history, attempt, fingerprint, CreatedAt and reopens kept (was %+v)", w, before)
			}
			if w.Token != got.Token || w.Generation != got.Generation || !w.UpdatedAt.Equal(got.UpdatedAt) {
				t.Fatalf("Collect returned %+v, the store holds %+v", got, w)
			}
		}
	default:
		t.Fatalf("no case for operation %q", row.Op)
	}
	if (row.Err == nil && err != nil) || (row.Err != nil && !errors.Is(err, row.Err)) {
		t.Fatalf("%s: err = %v, want %v (%s)", row.Op, err, row.Err, row.Answer)
	}

	after, gerr := e.s.Get(ctx, e.key, now)
	if row.To == driver.StateAbsent {
		if !errors.Is(gerr, driver.ErrNotFound) {
			t.Fatalf("after %s: Get = %+v, %v; want no record", row.Op, after, gerr)
		}
		return
	}
	if gerr != nil || after.State != row.To {
		t.Fatalf("after %s: state %s (%v), want %s", row.Op, after.State, gerr, row.To)
	}
	switch {
	case !row.Writes && (after.Token != before.Token || !after.UpdatedAt.Equal(before.UpdatedAt) || after.Status != before.Status):
		t.Fatalf("a refused %s changed the record: %+v, was %+v", row.Op, after, before)
	case row.Writes && (row.Op == driver.OpClaim || row.Op == driver.OpReopen || row.Op == driver.OpCollect) && after.Token != fresh:
		t.Fatalf("after %s the token is %q, want the request's", row.Op, after.Token)
	case row.Writes && !after.UpdatedAt.Equal(now):
		t.Fatalf("after %s UpdatedAt = %v, want %v", row.Op, after.UpdatedAt, now)
	}
}
