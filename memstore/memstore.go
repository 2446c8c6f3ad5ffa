// Package memstore is an in-process driver.Store: a map behind a mutex.
// It is exact (it passes storetest) but keeps nothing across restarts, so it
// is for tests, single-process tools and as the reference implementation.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Store is the in-memory store. The zero value is not usable; call New.
type Store struct {
	mu   sync.Mutex
	recs map[string]driver.Record
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.StuckLister   = (*Store)(nil)
	_ driver.Purger        = (*Store)(nil)
	_ driver.Amender       = (*Store)(nil)
	_ driver.Collector     = (*Store)(nil)
	_ driver.ResultLister  = (*Store)(nil)
	_ driver.StateLister   = (*Store)(nil)
	_ driver.UpdatedWalker = (*Store)(nil)
	_ driver.StateCounter  = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{recs: make(map[string]driver.Record)} }

// Claim implements driver.Store.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return driver.ClaimResult{}, driver.Unavailable("claim", err)
	}
	if req.Key == "" || req.Token == "" {
		return driver.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", driver.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.recs[req.Key]
	if exists && !req.Allows(old) {
		return driver.ClaimResult{Record: old}, nil
	}
	carried := exists && req.Carries(old)
	rec := driver.Record{
		Key:         req.Key,
		State:       driver.StateInProgress,
		LeaseUntil:  req.LeaseUntil,
		Token:       req.Token,
		Attempt:     1,
		Fingerprint: req.Fingerprint,
		Summary:     req.SummaryOver(old),
		CreatedAt:   req.Now,
		UpdatedAt:   req.Now,
		ExpiresAt:   req.ExpiresAt,
		Generation:  1,
	}
	if carried {
		rec.Attempt = old.Attempt + 1
		rec.CreatedAt = old.CreatedAt
		rec.Reopens, rec.ReopenedAt, rec.ReopenReason = old.Reopens, old.ReopenedAt, old.ReopenReason
		rec.PrevStatus, rec.PrevDetail = old.PrevStatus, old.PrevDetail
		rec.Generation, rec.History = old.Generation, old.History
	}
	s.recs[req.Key] = rec
	return driver.ClaimResult{Acquired: true, Reclaimed: exists && req.Reclaims(old), Record: rec}, nil
}

// Get implements driver.Store.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	if err := ctx.Err(); err != nil {
		return driver.Record{}, driver.Unavailable("get", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[key]
	if !ok || rec.Expired(now) {
		return driver.Record{}, driver.ErrNotFound
	}
	return rec, nil
}

// Finish implements driver.Store.
func (s *Store) Finish(ctx context.Context, f driver.FinishRequest) error {
	if err := ctx.Err(); err != nil {
		return driver.Unavailable("finish", err)
	}
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[f.Key]
	switch {
	case ok && f.Landed(rec):
		return nil // a retry of a finish that landed: nothing to change
	case !ok || !f.Allows(rec):
		return driver.ErrLeaseLost
	}
	rec.State, rec.Status, rec.Detail = f.State, f.Status, f.Detail
	rec.UpdatedAt, rec.ExpiresAt = f.Now, f.ExpiresAt
	if f.State == driver.StateWaiting {
		rec.LeaseUntil = f.NotBefore
	}
	if f.Generation > 0 {
		rec.Generation = f.Generation
	}
	if f.History != nil {
		rec.History = slices.Clone(f.History)
	}
	s.recs[f.Key] = rec
	return nil
}

// Extend implements driver.Store.
func (s *Store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	if err := ctx.Err(); err != nil {
		return driver.Unavailable("extend", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[req.Key]
	if !ok || !req.Allows(rec) {
		return driver.ErrLeaseLost
	}
	rec.LeaseUntil, rec.UpdatedAt = req.LeaseUntil, req.Now
	s.recs[req.Key] = rec
	return nil
}

// Reopen implements driver.Store.
func (s *Store) Reopen(ctx context.Context, r driver.ReopenRequest) (driver.Record, error) {
	if err := ctx.Err(); err != nil {
		return driver.Record{}, driver.Unavailable("reopen", err)
	}
	if r.Key == "" || r.Token == "" {
		return driver.Record{}, fmt.Errorf("%w: reopen needs key and token", driver.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[r.Key]
	if !ok || rec.Expired(r.Now) {
		return driver.Record{}, driver.ErrNotFound
	}
	if !r.Allows(rec) {
		return rec, driver.ErrNotFailed
	}
	if r.Generation > 0 {
		rec.Generation, rec.History = r.Generation, slices.Clone(r.History)
	}
	rec.PrevStatus, rec.PrevDetail = rec.Status, rec.Detail
	rec.State, rec.Token, rec.Status, rec.Detail = driver.StateInProgress, r.Token, "", ""
	rec.LeaseUntil, rec.UpdatedAt, rec.ExpiresAt = r.LeaseUntil, r.Now, r.ExpiresAt
	rec.Reopens++
	rec.ReopenedAt, rec.ReopenReason = r.Now, r.Reason
	s.recs[r.Key] = rec
	return rec, nil
}

// Amend implements driver.Amender.
func (s *Store) Amend(ctx context.Context, a driver.AmendRequest) (driver.Record, error) {
	if err := ctx.Err(); err != nil {
		return driver.Record{}, driver.Unavailable("amend", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[a.Key]
	if !ok || rec.Expired(a.Now) {
		return driver.Record{}, driver.ErrNotFound
	}
	if !a.Allows(rec) {
		return rec, driver.ErrStale
	}
	rec.Status, rec.Detail, rec.History, rec.UpdatedAt = a.Status, a.Detail, slices.Clone(a.History), a.Now
	s.recs[a.Key] = rec
	return rec, nil
}

// Collect implements driver.Collector.
func (s *Store) Collect(ctx context.Context, c driver.CollectRequest) (driver.Record, error) {
	if err := ctx.Err(); err != nil {
		return driver.Record{}, driver.Unavailable("collect", err)
	}
	if !c.Valid() {
		return driver.Record{}, fmt.Errorf("%w: collect needs key, the token read, a new token, a state it collects from and the posted generation", driver.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.recs[c.Key]
	switch {
	case !ok || rec.Expired(c.Now):
		return driver.Record{}, driver.ErrNotFound
	case c.Landed(rec):
		return rec, nil
	case !c.Allows(rec):
		return rec, driver.ErrStale
	}
	rec.State, rec.Token, rec.Status, rec.Detail = driver.StateDone, c.NewToken, c.Status, c.Detail
	rec.Generation, rec.History = c.PostedGeneration, slices.Clone(c.History)
	rec.UpdatedAt, rec.ExpiresAt = c.Now, c.ExpiresAt
	s.recs[c.Key] = rec
	return rec, nil
}

// ListByResult implements driver.ResultLister.
func (s *Store) ListByResult(_ context.Context, state driver.State, status string, now time.Time, limit int) ([]driver.Record, error) {
	s.mu.Lock()
	var out []driver.Record
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
func (s *Store) Stuck(_ context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	s.mu.Lock()
	var all []driver.Record
	for _, r := range s.recs {
		if r.State == driver.StateInProgress && !now.Before(r.LeaseUntil) && !r.Expired(now) && !strings.HasPrefix(r.Key, driver.InternalKeyPrefix) {
			all = append(all, r)
		}
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].LeaseUntil.Before(all[j].LeaseUntil) })
	return all[:min(limit, len(all))], len(all), nil
}

// Purge implements driver.Purger.
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

// Expired implements driver.Purger.
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

// CountByState implements driver.StateCounter.
func (s *Store) CountByState(_ context.Context, now time.Time) (map[driver.State]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := driver.NewCounts()
	for _, r := range s.recs {
		if !r.Expired(now) && !strings.HasPrefix(r.Key, driver.InternalKeyPrefix) {
			out[r.State]++
		}
	}
	return out, nil
}

// ListState implements driver.StateLister.
func (s *Store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return driver.ListPage{}, driver.Unavailable("list", err)
	}
	s.mu.Lock()
	var all []driver.Record
	for _, r := range s.recs {
		if req.Listed(r) {
			all = append(all, r)
		}
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].Key < all[j].Key })
	return driver.Page(all, req.PageLimit()), nil
}

// WalkUpdated implements driver.UpdatedWalker: one pass over the records
// (fn is called outside the store's lock, on a copy of the matches).
func (s *Store) WalkUpdated(ctx context.Context, req driver.WalkRequest, fn func(driver.Record) error) error {
	if err := ctx.Err(); err != nil {
		return driver.Unavailable("walk", err)
	}
	s.mu.Lock()
	var matched []driver.Record
	for _, r := range s.recs {
		if req.Walked(r) {
			matched = append(matched, r)
		}
	}
	s.mu.Unlock()
	for _, r := range matched {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
