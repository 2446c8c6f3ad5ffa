package storetest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

func TestMemstoreIsLinearizable(t *testing.T) {
	storetest.Linearizable(t, func(*testing.T) driver.Store { return memstore.New() }, storetest.LinearizableOptions{Histories: 500})
}

// Two histories rarely make every kind of call (a refused reopen appears in
// about one history in seventy): the run records more until they all have
// appeared, instead of failing by chance.
func TestCoverageIsReachedBeyondTheHistoriesAskedFor(t *testing.T) {
	storetest.Linearizable(t, func(*testing.T) driver.Store { return memstore.New() }, storetest.LinearizableOptions{Histories: 2})
}

// Planted faults: each wraps a correct store with one bug the state
// machine forbids; the checker must call the history not linearizable.

// noFencing finishes whatever the token (the fencing condition dropped).
type noFencing struct{ driver.Store }

func (s noFencing) Finish(ctx context.Context, req driver.FinishRequest) error {
	r, err := s.Store.Get(ctx, req.Key, req.Now)
	if err != nil {
		return driver.ErrLeaseLost
	}
	if r.State == driver.StateInProgress && r.Token != req.Token {
		req.Token = r.Token // finish it as if it were ours
	}
	return s.Store.Finish(ctx, req)
}

// earlyLease lets a claim take a lease 1 ms before it passed.
type earlyLease struct{ driver.Store }

func (s earlyLease) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	req.LeaseExpiredBy = req.LeaseExpiredBy.Add(time.Millisecond)
	return s.Store.Claim(ctx, req)
}

// losesDone forgets an acknowledged DONE: the next claim finds no record.
type losesDone struct {
	driver.Store
	mu   sync.Mutex
	lost map[string]bool
}

func (s *losesDone) Finish(ctx context.Context, req driver.FinishRequest) error {
	err := s.Store.Finish(ctx, req)
	if err == nil && req.State == driver.StateDone {
		s.mu.Lock()
		s.lost[req.Key] = true
		s.mu.Unlock()
	}
	return err
}

func (s *losesDone) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	s.mu.Lock()
	lost := s.lost[req.Key]
	delete(s.lost, req.Key)
	s.mu.Unlock()
	if lost {
		req.Now, req.ExpiresAt = req.Now.Add(2*time.Hour), req.ExpiresAt.Add(2*time.Hour) // the DONE is gone
		res, err := s.Store.Claim(ctx, req)
		return res, err
	}
	return s.Store.Claim(ctx, req)
}

// claimFault is a store whose every claim's answer goes through fault,
// which may change it, or change the request and have it made again.
type claimFault struct {
	driver.Store
	fault func(req *driver.ClaimRequest, res *driver.ClaimResult) (again bool)
}

func (s claimFault) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, req)
	if err != nil {
		return res, err
	}
	if s.fault(&req, &res) {
		return s.Store.Claim(ctx, req)
	}
	return res, nil
}

// twiceApplied lets a claim that lost a race to a live claim win as well.
func twiceApplied(req *driver.ClaimRequest, res *driver.ClaimResult) bool {
	if !res.Acquired && res.Record.State == driver.StateInProgress && res.Record.Attempt == 1 {
		rec := res.Record
		rec.Token = req.Token
		*res = driver.ClaimResult{Acquired: true, Record: rec}
	}
	return false
}

// reopensDone answers a reopen of a DONE record as if it had been FAILED
// (the state condition dropped from the answer).
type reopensDone struct{ driver.Store }

func (s reopensDone) Reopen(ctx context.Context, req driver.ReopenRequest) (driver.Record, error) {
	rec, err := s.Store.Reopen(ctx, req)
	if errors.Is(err, driver.ErrNotFailed) && rec.State == driver.StateDone {
		rec.State, rec.Token, rec.LeaseUntil, rec.Reopens = driver.StateInProgress, req.Token, req.LeaseUntil, rec.Reopens+1
		return rec, nil
	}
	return rec, err
}

// ignoresFingerprint reclaims an expired lease whatever the payload.
func ignoresFingerprint(req *driver.ClaimRequest, res *driver.ClaimResult) bool {
	if !res.Acquired && res.Record.State == driver.StateInProgress && res.Record.Fingerprint != req.Fingerprint &&
		!req.LeaseExpiredBy.Before(res.Record.LeaseUntil) {
		req.Fingerprint = res.Record.Fingerprint
		return true
	}
	return false
}

// resumesEarly claims a WAITING record before its not-before (the not-before
// ignored: a retry posted before its time).
func resumesEarly(req *driver.ClaimRequest, res *driver.ClaimResult) bool {
	if !res.Acquired && res.Record.State == driver.StateWaiting && res.Record.Fingerprint == req.Fingerprint {
		req.LeaseExpiredBy = res.Record.LeaseUntil
		return true
	}
	return false
}

// resumeAsReclaim reports the resume of a WAITING record as a reclaim (the
// work would ask the bank about an attempt that ended cleanly, or worse,
// treat a clean wait as a crash).
func resumeAsReclaim(_ *driver.ClaimRequest, res *driver.ClaimResult) bool {
	if res.Acquired && res.Record.Attempt > 1 {
		res.Reclaimed = true
	}
	return false
}

// dropsSummary writes a reclaim's summary only when it carries one (it
// forgets the record's when the claim has none): an older summary lost.
type dropsSummary struct{ driver.Store }

func (s dropsSummary) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, req)
	if err == nil && res.Acquired && req.Summary == "" {
		res.Record.Summary = ""
	}
	return res, err
}

func TestPlantedFaultsAreNotLinearizable(t *testing.T) {
	for _, tt := range []struct {
		name string
		wrap func(driver.Store) driver.Store
	}{
		{"finish without the fencing condition", func(s driver.Store) driver.Store { return noFencing{s} }},
		{"a claim wins a lease 1 ms early", func(s driver.Store) driver.Store { return earlyLease{s} }},
		{"an acknowledged DONE is lost", func(s driver.Store) driver.Store { return &losesDone{Store: s, lost: map[string]bool{}} }},
		{"a claim is applied twice", func(s driver.Store) driver.Store { return claimFault{s, twiceApplied} }},
		{"a DONE record is reopened", func(s driver.Store) driver.Store { return reopensDone{s} }},
		{"a reclaim ignores the fingerprint", func(s driver.Store) driver.Store { return claimFault{s, ignoresFingerprint} }},
		{"a waiting record is resumed before its not-before", func(s driver.Store) driver.Store { return claimFault{s, resumesEarly} }},
		{"a resume is reported as a reclaim", func(s driver.Store) driver.Store { return claimFault{s, resumeAsReclaim} }},
		{"a claim without a summary forgets the record's", func(s driver.Store) driver.Store { return dropsSummary{s} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			found, err := storetest.FindNonLinearizable(t.Context(), func() driver.Store { return tt.wrap(memstore.New()) },
				storetest.LinearizableOptions{Histories: 5000, LoseAnswers: 0.05}) // stops at the first caught
			if err != nil {
				t.Fatal(err)
			}
			if found == "" {
				t.Fatal("5000 histories of a faulty store all passed the checker")
			}
			t.Logf("caught; visualisation: %s", found)
		})
	}
}

// Every write of the state machine is in the linearizability model, or
// says why not.
func TestTheModelHasEveryOp(t *testing.T) {
	for _, op := range driver.Ops {
		if _, ok := storetest.Modelled[op]; !ok {
			t.Errorf("%s: not in the model (storetest.Modelled): add its case to step, or say why it is left out", op)
		}
	}
}
