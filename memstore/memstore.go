// Package memstore is an in-process idempotency.Store: a map behind a mutex.
// It is exact (it passes storetest) but keeps nothing across restarts, so it
// is for tests, single-process tools and as the reference implementation.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// Store is the in-memory store. The zero value is not usable; call New.
type Store struct {
	mu   sync.Mutex
	recs map[string]idempotency.Record
}

var (
	_ idempotency.Store        = (*Store)(nil)
	_ idempotency.StuckLister  = (*Store)(nil)
	_ idempotency.Purger       = (*Store)(nil)
	_ idempotency.Amender      = (*Store)(nil)
	_ idempotency.ResultLister = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{recs: make(map[string]idempotency.Record)} }

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, idempotency.Unavailable("claim", err)
	}
	if req.Key == "" || req.Token == "" {
		return idempotency.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", idempotency.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.recs[req.Key]
	if exists && !req.Allows(old) {
		return idempotency.ClaimResult{Record: old}, nil
	}
	reclaim := exists && !old.Expired(req.Now)
	rec := idempotency.Record{
		Key:         req.Key,
		State:       idempotency.StateInProgress,
		LeaseUntil:  req.LeaseUntil,
		Token:       req.Token,
		Attempt:     1,
		Fingerprint: req.Fingerprint,
		CreatedAt:   req.Now,
		UpdatedAt:   req.Now,
		ExpiresAt:   req.ExpiresAt,
		Generation:  1,
	}
	if reclaim {
		rec.Attempt = old.Attempt + 1
		rec.CreatedAt = old.CreatedAt
		rec.Reopens, rec.ReopenedAt, rec.ReopenReason = old.Reopens, old.ReopenedAt, old.ReopenReason
		rec.PrevStatus, rec.PrevDetail = old.PrevStatus, old.PrevDetail
		rec.Generation, rec.History = old.Generation, old.History
	}
	s.recs[req.Key] = rec
	return idempotency.ClaimResult{Acquired: true, Reclaimed: reclaim, Record: rec}, nil
}

// Get implements idempotency.Store.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, idempotency.Unavailable("get", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[key]
	if !ok || rec.Expired(now) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	return rec, nil
}

// held returns the record iff it is IN_PROGRESS under token. Caller holds mu.
func (s *Store) held(key, token string) (idempotency.Record, error) {
	rec, ok := s.recs[key]
	if !ok || rec.State != idempotency.StateInProgress || rec.Token != token {
		return idempotency.Record{}, idempotency.ErrLeaseLost
	}
	return rec, nil
}

// Finish implements idempotency.Store.
func (s *Store) Finish(ctx context.Context, f idempotency.Finish) error {
	if err := ctx.Err(); err != nil {
		return idempotency.Unavailable("finish", err)
	}
	if f.State != idempotency.StateDone && f.State != idempotency.StateFailed {
		return fmt.Errorf("%w: finish to state %q", idempotency.ErrInvalid, f.State)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.recs[f.Key]; ok && rec.State == f.State && rec.Token == f.Token {
		return nil // a retry of a finish that landed: nothing to change
	}
	rec, err := s.held(f.Key, f.Token)
	if err != nil {
		return err
	}
	rec.State, rec.Status, rec.Detail = f.State, f.Status, f.Detail
	rec.UpdatedAt, rec.ExpiresAt = f.Now, f.ExpiresAt
	s.recs[f.Key] = rec
	return nil
}

// Extend implements idempotency.Store.
func (s *Store) Extend(ctx context.Context, key, token string, leaseUntil, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return idempotency.Unavailable("extend", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.held(key, token)
	if err != nil {
		return err
	}
	rec.LeaseUntil, rec.UpdatedAt = leaseUntil, now
	s.recs[key] = rec
	return nil
}

// Reopen implements idempotency.Store.
func (s *Store) Reopen(ctx context.Context, r idempotency.Reopen) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, idempotency.Unavailable("reopen", err)
	}
	if r.Key == "" || r.Token == "" {
		return idempotency.Record{}, fmt.Errorf("%w: reopen needs key and token", idempotency.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[r.Key]
	if !ok || rec.Expired(r.Now) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	if rec.State != idempotency.StateFailed || (r.PrevToken != "" && rec.Token != r.PrevToken) {
		return rec, idempotency.ErrNotFailed
	}
	if r.Generation > 0 {
		rec.Generation, rec.History = r.Generation, slices.Clone(r.History)
	}
	rec.PrevStatus, rec.PrevDetail = rec.Status, rec.Detail
	rec.State, rec.Token, rec.Status, rec.Detail = idempotency.StateInProgress, r.Token, "", ""
	rec.LeaseUntil, rec.UpdatedAt, rec.ExpiresAt = r.LeaseUntil, r.Now, r.ExpiresAt
	rec.Reopens++
	rec.ReopenedAt, rec.ReopenReason = r.Now, r.Reason
	s.recs[r.Key] = rec
	return rec, nil
}

// Amend implements idempotency.Amender.
func (s *Store) Amend(ctx context.Context, a idempotency.Amend) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, idempotency.Unavailable("amend", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[a.Key]
	if !ok || rec.Expired(a.Now) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	if rec.State != idempotency.StateDone || rec.Token != a.Token || rec.Status != a.FromStatus {
		return rec, idempotency.ErrStale
	}
	rec.Status, rec.Detail, rec.History, rec.UpdatedAt = a.Status, a.Detail, slices.Clone(a.History), a.Now
	s.recs[a.Key] = rec
	return rec, nil
}

// ListByResult implements idempotency.ResultLister.
func (s *Store) ListByResult(_ context.Context, state idempotency.State, status string, now time.Time, limit int) ([]idempotency.Record, error) {
	s.mu.Lock()
	var out []idempotency.Record
	for _, r := range s.recs {
		if r.State == state && r.Status == status && !r.Expired(now) {
			out = append(out, r)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].UpdatedAt.Before(out[j].UpdatedAt) })
	return out[:min(limit, len(out))], nil
}

// Stuck returns the IN_PROGRESS records whose lease passed before now,
// oldest lease first (at most limit), and how many there are in all.
func (s *Store) Stuck(_ context.Context, now time.Time, limit int) ([]idempotency.Record, int, error) {
	s.mu.Lock()
	var all []idempotency.Record
	for _, r := range s.recs {
		if r.State == idempotency.StateInProgress && !now.Before(r.LeaseUntil) && !r.Expired(now) {
			all = append(all, r)
		}
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].LeaseUntil.Before(all[j].LeaseUntil) })
	return all[:min(limit, len(all))], len(all), nil
}

// Purge implements idempotency.Purger.
func (s *Store) Purge(_ context.Context, now time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.recs {
		if n >= limit {
			break
		}
		if r.Expired(now) {
			delete(s.recs, k)
			n++
		}
	}
	return n, nil
}

// Expired implements idempotency.Purger.
func (s *Store) Expired(_ context.Context, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if r.Expired(now) {
			n++
		}
	}
	return n, nil
}

// CountByState implements idempotency.StateCounter.
func (s *Store) CountByState(_ context.Context, now time.Time) (map[idempotency.State]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[idempotency.State]int{}
	for _, r := range s.recs {
		if !r.Expired(now) {
			out[r.State]++
		}
	}
	return out, nil
}
