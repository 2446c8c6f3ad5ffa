package protosim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// errStoreDown is a store call that failed or whose answer was lost: to
// the caller, the store could not be reached (retryable).
var errStoreDown = errors.New("protosim: the store did not answer")

// store is a real driver.Store (memstore, SQLite, PostgreSQL) with every
// call passing the scheduler's gate: it may fail, lose its answer, or be
// where its caller dies. It also notes who wrote which token, for the
// invariants.
type store struct {
	s     *Sim
	inner driver.Store
}

var (
	_ driver.Store         = (*store)(nil)
	_ driver.Amender       = (*store)(nil)
	_ driver.StateLister   = (*store)(nil)
	_ driver.UpdatedWalker = (*store)(nil)
	_ driver.StuckLister   = (*store)(nil)
	_ driver.Collector     = (*store)(nil)
)

// call runs op through the gate: a fault before it is an error and no
// call; a lost answer makes the call and answers an error.
func call[T any](ctx context.Context, w *store, what string, op func() (T, error)) (T, error) {
	var zero T
	f, err := w.s.gate(ctx, "store."+what)
	if err != nil {
		return zero, err
	}
	if f == failBefore {
		return zero, errStoreDown
	}
	v, err := op()
	if f == loseAnswer {
		return zero, errStoreDown
	}
	return v, err
}

func (w *store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	return call(ctx, w, "Claim "+req.Key, func() (driver.ClaimResult, error) {
		if w.s.cfg.Plant == PlantDropSummary {
			req.Summary = "" // a claim path that forgets what reconciliation compares: (h)
		}
		res, err := w.inner.Claim(ctx, req)
		if err == nil && res.Acquired {
			w.s.wrote(ctx, req.Key, req.Token, "claim", req.LeaseUntil)
		}
		if err == nil && !strings.HasPrefix(req.Key, driver.InternalKeyPrefix) {
			w.s.saw("claim " + claimText(res, nil))
		}
		w.s.tracef("%s: claim %s → %s", who(ctx), req.Key, claimText(res, err))
		return res, err
	})
}

func (w *store) Get(ctx context.Context, key string, now time.Time) (driver.Record, error) {
	return call(ctx, w, "Get "+key, func() (driver.Record, error) { return w.inner.Get(ctx, key, now) })
}

func (w *store) Finish(ctx context.Context, req driver.FinishRequest) error {
	_, err := call(ctx, w, "Finish "+req.Key, func() (struct{}, error) {
		err := w.inner.Finish(ctx, req)
		if err == nil && !strings.HasPrefix(req.Key, driver.InternalKeyPrefix) {
			w.s.saw("finish " + string(req.State))
		}
		w.s.tracef("%s: finish %s %s %s gen %d → %v", who(ctx), req.Key, req.State, req.Status, req.Generation, errText(err))
		return struct{}{}, err
	})
	return err
}

func (w *store) Extend(ctx context.Context, req driver.ExtendRequest) error {
	_, err := call(ctx, w, "Extend "+req.Key, func() (struct{}, error) {
		err := w.inner.Extend(ctx, req)
		if !req.LeaseUntil.After(req.Now) {
			w.s.tracef("%s: yield %s → %v", who(ctx), req.Key, errText(err))
		}
		return struct{}{}, err
	})
	return err
}

func (w *store) Reopen(ctx context.Context, req driver.ReopenRequest) (driver.Record, error) {
	return call(ctx, w, "Reopen "+req.Key, func() (driver.Record, error) {
		rec, err := w.inner.Reopen(ctx, req)
		if err == nil {
			w.s.wrote(ctx, req.Key, req.Token, "reopen", req.LeaseUntil)
			w.s.saw("reopen")
			if a := actorOf(ctx); a != nil && a.proposal != "" {
				w.s.movedByApproval(a.proposal, req.Key)
				w.s.saw("reopen by an approval")
			}
		}
		w.s.tracef("%s: reopen %s gen %d → %v", who(ctx), req.Key, req.Generation, errText(err))
		return rec, err
	})
}

func (w *store) Collect(ctx context.Context, req driver.CollectRequest) (driver.Record, error) {
	co, ok := w.inner.(driver.Collector)
	if !ok {
		return driver.Record{}, driver.ErrNotIndexed
	}
	return call(ctx, w, "Collect "+req.Key, func() (driver.Record, error) {
		rec, err := co.Collect(ctx, req)
		if err == nil {
			w.s.saw("collect")
		}
		w.s.tracef("%s: collect %s from %s gen %d (posted gen %d) → %v", who(ctx), req.Key, req.From, req.Generation, req.PostedGeneration, errText(err))
		return rec, err
	})
}

func (w *store) Amend(ctx context.Context, req driver.AmendRequest) (driver.Record, error) {
	am, ok := w.inner.(driver.Amender)
	if !ok {
		return driver.Record{}, driver.ErrNotIndexed
	}
	return call(ctx, w, "Amend "+req.Key, func() (driver.Record, error) { return am.Amend(ctx, req) })
}

func (w *store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	l, ok := w.inner.(driver.StateLister)
	if !ok {
		return driver.ListPage{}, driver.ErrNotIndexed
	}
	return call(ctx, w, "ListState", func() (driver.ListPage, error) { return l.ListState(ctx, req) })
}

func (w *store) WalkUpdated(ctx context.Context, req driver.WalkRequest, fn func(driver.Record) error) error {
	if wk, ok := w.inner.(driver.UpdatedWalker); ok {
		_, err := call(ctx, w, "WalkUpdated", func() (struct{}, error) { return struct{}{}, wk.WalkUpdated(ctx, req, fn) })
		return err
	}
	return driver.Walk(ctx, struct {
		driver.Store
		driver.StateLister
	}{w, w}, req, fn)
}

func (w *store) Stuck(ctx context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	l, ok := w.inner.(driver.StuckLister)
	if !ok {
		return nil, 0, driver.ErrNotIndexed
	}
	type page struct {
		recs []driver.Record
		n    int
	}
	p, err := call(ctx, w, "Stuck", func() (page, error) { r, n, err := l.Stuck(ctx, now, limit); return page{r, n}, err })
	return p.recs, p.n, err
}

func who(ctx context.Context) string {
	if a := actorOf(ctx); a != nil {
		return a.name
	}
	return "check"
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func claimText(res driver.ClaimResult, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case res.Reclaimed:
		return "reclaimed"
	case res.Acquired && res.Record.Attempt > 1:
		return "resumed" // a WAITING record come due
	case res.Acquired:
		return "acquired"
	}
	return "not acquired (" + res.Record.State.String() + ")"
}

// bank is the bank simulator's ledger behind the gate: a debit may fail
// before it reaches the bank, or post and lose its answer.
type bank struct {
	s      *Sim
	ledger *corebanksim.Ledger
}

var _ charge.Debiter = (*bank)(nil)

func (b *bank) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	f, err := b.s.gate(ctx, "bank.Debit "+req.IdempotencyKey)
	if err != nil {
		return charge.DebitReceipt{}, err
	}
	if f == failBefore {
		return charge.DebitReceipt{}, corebanksim.ErrUnavailable
	}
	if b.s.cfg.Plant == PlantBankIgnoresKeys && b.ledger.PostingsByKey()[req.IdempotencyKey] > 0 {
		b.s.again++
		req.IdempotencyKey += fmt.Sprintf("#again%d", b.s.again)
	}
	r, err := b.ledger.Debit(ctx, req)
	b.s.debited(ctx, req, r, err)
	if f == loseAnswer {
		return charge.DebitReceipt{}, corebanksim.ErrUnavailable
	}
	return r, err
}

// notifier records the notices; it never fails (a notice's failure moves
// no money, and the protocol's invariants are about money).
type notifier struct{ s *Sim }

func (n notifier) NotifyPreDebit(ctx context.Context, c charge.Charge, r charge.DebitReceipt) error {
	return nil
}

// NotifyAdvance is notice-first mode's advance notice: it may fail (no
// debit follows) or go out with its answer lost (sent again later, under
// the same notification key).
func (n notifier) NotifyAdvance(ctx context.Context, a charge.AdvanceNotice) error {
	f, err := n.s.gate(ctx, "notice.Advance "+a.ChargeID)
	if err != nil {
		return err
	}
	if f != pass {
		return errors.New("protosim: the notice channel did not answer")
	}
	return nil
}
