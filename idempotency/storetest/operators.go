package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

var operatorsCases = []testCase{
	{"ReopenFailed", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "debit declined: UNAUTHORIZED"); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		e.clock.Advance(time.Hour)
		reopenedAt := e.clock.Now()
		r, err := e.g.Reopen(t.Context(), e.key, "gateway token fixed, INC-42", idempotency.ReopenOptions{})
		if err != nil {
			t.Fatalf("Reopen: %v", err)
		}
		if r.State != driver.StateInProgress || r.Attempt != 1 || r.Fingerprint != fpA || r.Status != "" || r.Detail != "" ||
			r.PrevStatus != "FAILED" || r.PrevDetail != "debit declined: UNAUTHORIZED" || r.Reopens != 1 ||
			r.ReopenReason != "gateway token fixed, INC-42" || r.Token == c.Record.Token || r.Token == "" {
			t.Fatalf("reopened record = %+v", r)
		}
		sameTime(t, "ReopenedAt", r.ReopenedAt, reopenedAt)
		sameTime(t, "ExpiresAt renewed", r.ExpiresAt, reopenedAt.Add(Retention))
		if got := e.get(t); got.Token != r.Token || got.State != driver.StateInProgress || got.Reopens != 1 || got.PrevDetail != r.PrevDetail {
			t.Fatalf("stored after Reopen = %+v", got)
		}
		// The old owner cannot write over it; a different payload is still a
		// conflict; the next delivery reclaims it at once.
		wantErr(t, "old lease Complete", e.g.Complete(t.Context(), c.Lease(), "DEBITED", "stale"), idempotency.ErrLeaseLost)
		e.claim(t, fpB, idempotency.Conflict)
		again := e.claim(t, fpA, idempotency.Reclaimed)
		if again.Record.Attempt != 2 {
			t.Fatalf("claim after reopen: attempt %d, want 2", again.Record.Attempt)
		}
		if err := e.g.Complete(t.Context(), again.Lease(), "DEBITED", "CBS1"); err != nil {
			t.Fatalf("Complete after reopen: %v", err)
		}
		got := e.get(t)
		if got.State != driver.StateDone || got.Detail != "CBS1" || got.Reopens != 1 || got.PrevStatus != "FAILED" ||
			got.ReopenReason != "gateway token fixed, INC-42" || !got.ReopenedAt.Equal(reopenedAt) {
			t.Fatalf("record after the reopened charge finished = %+v (the audit trail must stay)", got)
		}
	}},
	{"ReopenIntoANewGeneration", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if c.Record.Generation != 1 && c.Record.Generation != 0 {
			t.Fatalf("a fresh claim's generation %d, want 1", c.Record.Generation)
		}
		if got := e.get(t); got.Generation != 1 || len(got.History) != 0 {
			t.Fatalf("a fresh record: generation %d, history %q; want 1 and none", got.Generation, got.History)
		}
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "debit declined: INSUFFICIENT_FUNDS"); err != nil {
			t.Fatal(err)
		}
		refuse := errors.New("not a decline")
		_, err := e.g.Reopen(t.Context(), e.key, "funds arrived", idempotency.ReopenOptions{NewGeneration: true,
			Eligible: func(driver.Record) error { return refuse }})
		if !errors.Is(err, idempotency.ErrNotEligible) || !errors.Is(err, refuse) {
			t.Fatalf("a refused new generation: %v, want ErrNotEligible wrapping the rule's error", err)
		}
		if got := e.get(t); got.State != driver.StateFailed || got.Generation != 1 || got.Reopens != 0 {
			t.Fatalf("a refused new generation changed the record: %+v", got)
		}
		r, err := e.g.Reopen(t.Context(), e.key, "funds arrived", idempotency.ReopenOptions{NewGeneration: true, Operator: "ops-7",
			Eligible: func(r driver.Record) error { return nil }})
		if err != nil || r.Generation != 2 || len(r.History) != 1 ||
			!strings.Contains(r.History[0], "generation 1: FAILED debit declined: INSUFFICIENT_FUNDS") ||
			!strings.Contains(r.History[0], "ops-7") || !strings.Contains(r.History[0], "new generation 2") {
			t.Fatalf("reopened into a new generation: %+v %v", r, err)
		}
		// The claim and the work see the new generation; finishing keeps it.
		var seen int
		res, err := e.g.Do(t.Context(), e.key, fpA, func(_ context.Context, run idempotency.Run) (idempotency.Done, error) {
			seen = run.Generation
			return idempotency.Done{Status: "FAILED_AGAIN"}, fmt.Errorf("%w: declined again", idempotency.ErrPermanent)
		}, idempotency.DoOptions{})
		if seen != 2 || err != nil || res.Outcome != idempotency.Failed {
			t.Fatalf("Do after the reopen: generation %d (%v %v), want 2 and FAILED", seen, res, err)
		}
		if got := e.get(t); got.State != driver.StateFailed || got.Generation != 2 || len(got.History) != 1 {
			t.Fatalf("after generation 2 failed: %+v", got)
		}
		// A plain reopen keeps the generation and adds to the history.
		r, err = e.g.Reopen(t.Context(), e.key, "cause fixed", idempotency.ReopenOptions{})
		if err != nil || r.Generation != 2 || len(r.History) != 2 || !strings.Contains(r.History[1], "generation 2: FAILED") {
			t.Fatalf("a plain reopen of generation 2: %+v %v", r, err)
		}
		again := e.claim(t, fpA, idempotency.Reclaimed)
		if again.Record.Generation != 2 {
			t.Fatalf("reclaim after the plain reopen: generation %d, want 2", again.Record.Generation)
		}
		if err := e.g.Complete(t.Context(), again.Lease(), "DEBITED", "CBS9"); err != nil {
			t.Fatal(err)
		}
		if got := e.get(t); got.State != driver.StateDone || got.Generation != 2 || len(got.History) != 2 || got.History[0] != r.History[0] {
			t.Fatalf("DONE after two reopenings: %+v", got)
		}
		// Past retention the key starts again at generation 1.
		e.clock.Advance(Retention + time.Hour)
		fresh := e.claim(t, fpA, idempotency.Acquired)
		if fresh.Record.Generation > 1 {
			t.Fatalf("a claim past retention: generation %d", fresh.Record.Generation)
		}
		if got := e.get(t); got.Generation != 1 || len(got.History) != 0 || got.Reopens != 0 {
			t.Fatalf("a record taken over past retention keeps %d / %q / %d", got.Generation, got.History, got.Reopens)
		}
	}},
	{"ReopenIsConditionalOnTheRecordRead", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "first"); err != nil {
			t.Fatal(err)
		}
		stale := e.get(t).Token
		if _, err := e.g.Reopen(t.Context(), e.key, "once", idempotency.ReopenOptions{}); err != nil {
			t.Fatal(err)
		}
		again := e.claim(t, fpA, idempotency.Reclaimed)
		if err := e.g.Fail(t.Context(), again.Lease(), "FAILED", "second"); err != nil {
			t.Fatal(err)
		}
		// A reopen decided on the first FAILED record must not apply to the
		// second one.
		rec, err := e.s.Reopen(t.Context(), driver.ReopenRequest{Key: e.key, Token: "tok-stale", Reason: "stale", Now: e.clock.Now(),
			LeaseUntil: e.clock.Now(), ExpiresAt: e.clock.Now().Add(Retention), PrevToken: stale, Generation: 5, History: []string{"x"}})
		wantErr(t, "Reopen on a stale read", err, idempotency.ErrNotFailed)
		if rec.Detail != "second" {
			t.Fatalf("the refusal returned %+v, want the current record", rec)
		}
		if got := e.get(t); got.State != driver.StateFailed || got.Detail != "second" || got.Generation != 1 || got.Reopens != 1 {
			t.Fatalf("a reopen on a stale read changed the record: %+v", got)
		}
	}},
	{"ReopenOnlyFailed", func(t *testing.T, e *env) {
		_, err := e.g.Reopen(t.Context(), e.key, "why", idempotency.ReopenOptions{})
		wantErr(t, "Reopen of a missing key", err, idempotency.ErrNotFound)
		c := e.claim(t, fpA, idempotency.Acquired)
		rec, err := e.g.Reopen(t.Context(), e.key, "why", idempotency.ReopenOptions{})
		wantErr(t, "Reopen of IN_PROGRESS", err, idempotency.ErrNotFailed)
		if rec.State != driver.StateInProgress {
			t.Fatalf("Reopen of IN_PROGRESS returned %+v, want the record", rec)
		}
		if err := e.g.Complete(t.Context(), c.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		rec, err = e.g.Reopen(t.Context(), e.key, "why", idempotency.ReopenOptions{})
		wantErr(t, "Reopen of DONE", err, idempotency.ErrNotFailed)
		if rec.State != driver.StateDone {
			t.Fatalf("Reopen of DONE returned %+v", rec)
		}
		if got := e.get(t); got.State != driver.StateDone || got.Detail != "ref" || got.Reopens != 0 || got.Token != c.Record.Token {
			t.Fatalf("a refused Reopen changed the record: %+v", got)
		}
	}},
	{"AmendAndListByResult", func(t *testing.T, e *env) {
		am, ok := e.s.(driver.Amender)
		rl, ok2 := e.s.(driver.ResultLister)
		if !ok || !ok2 {
			t.Skip("the store does not amend results (optional)")
		}
		c := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(t.Context(), c.Lease(), "DEBITED_NOTIFICATION_FAILED", "notice-1"); err != nil {
			t.Fatal(err)
		}
		other := e.key + "-other"
		oc, err := e.g.Claim(t.Context(), other, fpA)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.g.Complete(t.Context(), oc.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatal(err)
		}
		list, err := rl.ListByResult(t.Context(), driver.StateDone, "DEBITED_NOTIFICATION_FAILED", e.clock.Now(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, r := range list {
			if r.Key == other {
				t.Fatalf("ListByResult listed a record of another status: %+v", r)
			}
			if r.Key == e.key {
				found++
			}
		}
		if found != 1 {
			t.Fatalf("ListByResult found the record %d times in %d", found, len(list))
		}
		cur := e.get(t)
		e.clock.Advance(time.Minute)
		stale := []driver.AmendRequest{
			{Key: e.key, Token: "someone-else", FromStatus: "DEBITED_NOTIFICATION_FAILED", Status: "DEBITED", Now: e.clock.Now()},
			{Key: e.key, Token: cur.Token, FromStatus: "DEBITED", Status: "DEBITED", Now: e.clock.Now()},
		}
		for _, a := range stale {
			rec, err := am.Amend(t.Context(), a)
			wantErr(t, "Amend of a record not as read", err, idempotency.ErrStale)
			if rec.Status != "DEBITED_NOTIFICATION_FAILED" {
				t.Fatalf("the refusal returned %+v", rec)
			}
		}
		_, err = am.Amend(t.Context(), driver.AmendRequest{Key: e.key + "-none", Token: "x", Now: e.clock.Now()})
		wantErr(t, "Amend of a missing record", err, idempotency.ErrNotFound)
		rec, err := am.Amend(t.Context(), driver.AmendRequest{Key: e.key, Token: cur.Token, FromStatus: "DEBITED_NOTIFICATION_FAILED",
			Status: "DEBITED", Detail: "CBS7", History: []string{"renotified"}, Now: e.clock.Now()})
		if err != nil || rec.Status != "DEBITED" || rec.Detail != "CBS7" || len(rec.History) != 1 || rec.State != driver.StateDone {
			t.Fatalf("Amend: %+v %v", rec, err)
		}
		got := e.get(t)
		if got.Status != "DEBITED" || got.Detail != "CBS7" || len(got.History) != 1 || got.Token != cur.Token || got.Attempt != cur.Attempt {
			t.Fatalf("stored after Amend: %+v", got)
		}
		sameTime(t, "UpdatedAt", got.UpdatedAt, e.clock.Now())
		e.claim(t, fpA, idempotency.DuplicateDone)
	}},
	{"StuckListsExpiredClaimsOldestFirst", func(t *testing.T, e *env) {
		sl := capable[driver.StuckLister](t, e, "the store does not list stuck claims (optional)")
		ctx := t.Context()
		claim := func(key string) idempotency.Claim {
			c, err := e.g.Claim(ctx, key, fpA)
			if err != nil || !c.Outcome.Owned() {
				t.Fatalf("claim %s: %v %v", key, c.Outcome, err)
			}
			return c
		}
		oldest := claim(e.key + "-a")
		e.clock.Advance(time.Second)
		newer := claim(e.key + "-b")
		done := claim(e.key + "-done")
		if err := e.g.Complete(ctx, done.Lease(), "DEBITED", ""); err != nil {
			t.Fatal(err)
		}
		tool := claim(driver.InternalKeyPrefix + e.key + "-tool") // a tool's own claim, left behind
		e.clock.Advance(Lease)                                    // a, b and the tool's are past their lease
		live := claim(e.key + "-live")
		recs, total, err := sl.Stuck(ctx, e.clock.Now(), 1000)
		if err != nil {
			t.Fatalf("Stuck: %v", err)
		}
		var ours []string
		for _, r := range recs {
			if len(r.Key) > len(e.key) && r.Key[:len(e.key)] == e.key {
				ours = append(ours, r.Key)
			}
			if r.State != driver.StateInProgress || r.LeaseUntil.After(e.clock.Now()) {
				t.Errorf("listed a claim that is not stuck: %+v", r)
			}
			if r.Key == tool.Record.Key {
				t.Errorf("listed a tool's own claim (%s) as a stuck charge", r.Key)
			}
		}
		if len(ours) != 2 || ours[0] != oldest.Record.Key || ours[1] != newer.Record.Key || total < 2 {
			t.Fatalf("stuck = %v (total %d), want [%s %s]; live %s and done must not be listed",
				ours, total, oldest.Record.Key, newer.Record.Key, live.Record.Key)
		}
		limited, total2, err := sl.Stuck(ctx, e.clock.Now(), 1)
		if err != nil || len(limited) != 1 || total2 != total {
			t.Fatalf("Stuck with limit 1: %d records, total %d (want %d), err %v", len(limited), total2, total, err)
		}
	}},
	{"CountByStateCountsLiveRecords", func(t *testing.T, e *env) {
		sc := capable[driver.StateCounter](t, e, "the store cannot count records by state cheaply (optional)")
		ctx := t.Context()
		before, err := sc.CountByState(ctx, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		done := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(ctx, done.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatal(err)
		}
		failed, err := e.g.Claim(ctx, e.key+"-failed", fpA)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.g.Fail(ctx, failed.Lease(), "FAILED", "declined"); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := e.g.Claim(ctx, fmt.Sprintf("%s-busy-%d", e.key, i), fpA); err != nil {
				t.Fatal(err)
			}
		}
		// A tool's own records (driver.InternalKeyPrefix), one DONE and
		// one IN_PROGRESS, are not charges: not counted.
		e.done(t, driver.InternalKeyPrefix+"tool/"+e.key, "SENT")
		if _, err := e.g.Claim(ctx, driver.InternalKeyPrefix+"tool/"+e.key+"-busy", fpA); err != nil {
			t.Fatal(err)
		}
		after, err := sc.CountByState(ctx, e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		for st, want := range map[driver.State]int{driver.StateDone: 1, driver.StateFailed: 1, driver.StateInProgress: 2} {
			if _, counted := after[st]; !counted && st == driver.StateDone {
				continue // a state missing from the map is not counted (DynamoDB: DONE is not in its index)
			}
			if got := after[st] - before[st]; got != want {
				t.Errorf("%s: %d more, want %d (before %v, after %v)", st, got, want, before, after)
			}
		}
	}},
	{"PurgeDeletesOnlyRecordsPastRetention", func(t *testing.T, e *env) {
		p := capable[driver.Purger](t, e, "the store expires records itself (optional)")
		ctx := t.Context()
		old := e.claim(t, fpA, idempotency.Acquired)
		if err := e.g.Complete(ctx, old.Lease(), "DEBITED", "ref"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)
		young, err := e.g.Claim(ctx, e.key+"-young", fpA)
		if err != nil || !young.Outcome.Owned() {
			t.Fatal(young.Outcome, err)
		}
		e.clock.Advance(Retention - time.Hour) // the first is past retention, the second is not
		now := e.clock.Now()
		before, err := p.Expired(ctx, now)
		if err != nil || before < 1 {
			t.Fatalf("Expired = %d, %v; want at least the one record past retention", before, err)
		}
		total := 0
		for {
			n, err := p.Purge(ctx, now, 1)
			if err != nil {
				t.Fatalf("Purge: %v", err)
			}
			if n > 1 {
				t.Fatalf("Purge deleted %d records with limit 1", n)
			}
			if n == 0 {
				break
			}
			total += n
		}
		if after, err := p.Expired(ctx, now); err != nil || after != 0 || total != before {
			t.Fatalf("after purging: %d expired left, %d purged of %d (%v)", after, total, before, err)
		}
		if _, err := e.s.Get(ctx, e.key, time.Time{}); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("the expired record is still there: %v", err)
		}
		if r, err := e.g.Get(ctx, e.key+"-young"); err != nil || r.Token != young.Record.Token {
			t.Fatalf("Purge deleted a record inside its retention: %v", err)
		}
	}},
}
