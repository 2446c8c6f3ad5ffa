package main

import (
	"context"
	"os"
	"syscall"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Crash drills exist in the test binary only (this file): a child process
// of the tests started with IC_CRASH_AT SIGKILLs itself right after that
// step succeeds, to prove what happens in each crash window. The production
// binary has no such flag, variable or code.
const (
	crashAfterClaim = "after-claim" // claimed, nothing debited
	crashAfterDebit = "after-debit" // debited, DONE not recorded
	crashAfterDone  = "after-done"  // DONE recorded, message not acked
)

// crashDrill is the cli.Env.Drill of a child started with IC_CRASH_AT=at
// (nil when at is empty); an unknown point is a bug in the test.
func crashDrill(at string) func(queue.Queue, driver.Store, charge.Debiter) (queue.Queue, driver.Store, charge.Debiter) {
	switch at {
	case "":
		return nil
	case crashAfterClaim, crashAfterDebit, crashAfterDone:
		return func(q queue.Queue, s driver.Store, d charge.Debiter) (queue.Queue, driver.Store, charge.Debiter) {
			return crashingQueue{q, s, at}, crashingStore{s, at}, crashingDebiter{d, at}
		}
	}
	panic("IC_CRASH_AT=" + at + " is not after-claim, after-debit or after-done")
}

func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}

type crashingStore struct {
	driver.Store
	at string
}

func (s crashingStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, req)
	if err == nil && res.Acquired && s.at == crashAfterClaim {
		die()
	}
	return res, err
}

func (s crashingStore) Finish(ctx context.Context, f driver.FinishRequest) error {
	err := s.Store.Finish(ctx, f)
	if err == nil && s.at == crashAfterDone {
		die()
	}
	return err
}

// crashingQueue carries the drill onto claims that ride in the queue's
// transactions (a backend whose queue and store share a database): it dies
// right after a receive that acquired a claim, or right after a result was
// written with its message's delete.
type crashingQueue struct {
	queue.Queue
	store driver.Store
	at    string
}

func (q crashingQueue) Holds(s driver.Store) bool {
	cr, ok := q.Queue.(queue.ClaimingReceiver)
	if cs, wrapped := s.(crashingStore); wrapped {
		s = cs.Store
	}
	return ok && cr.Holds(s)
}

func (q crashingQueue) ReceiveClaiming(ctx context.Context, max int, p queue.ClaimPolicy) ([]queue.Message, error) {
	msgs, err := q.Queue.(queue.ClaimingReceiver).ReceiveClaiming(ctx, max, p)
	for i, m := range msgs {
		if m.Bound == nil {
			continue
		}
		// Look at the claim (taking it) and hand it on to the Guard.
		req, res, ok := m.Bound.Claimed()
		if ok && res.Acquired && q.at == crashAfterClaim {
			die()
		}
		cb := &crashingBound{Bound: m.Bound, at: q.at}
		if ok {
			cb.claim = driver.NewClaimedAtReceive(q.store, req, res)
		} else {
			cb.claim = driver.NewClaimedAtReceive(q.store, driver.ClaimRequest{}, driver.ClaimResult{})
			cb.claim.Claimed() // none to hand on
		}
		msgs[i].Bound = cb
	}
	return msgs, err
}

// crashingBound dies right after a result's write (with the message's
// delete) succeeded. The receive above took the inner claim to look at it:
// it hands the claim on (and gives it up) itself.
type crashingBound struct {
	driver.Bound
	claim *driver.ClaimedAtReceive
	at    string
}

func (b *crashingBound) Claimed() (driver.ClaimRequest, driver.ClaimResult, bool) {
	return b.claim.Claimed()
}

func (b *crashingBound) Release(ctx context.Context) error { return b.claim.Release(ctx) }

func (b *crashingBound) Finish(ctx context.Context, f driver.FinishRequest) error {
	err := b.Bound.Finish(ctx, f)
	if err == nil && b.at == crashAfterDone {
		die()
	}
	return err
}

type crashingDebiter struct {
	charge.Debiter
	at string
}

func (d crashingDebiter) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	r, err := d.Debiter.Debit(ctx, req)
	if err == nil && d.at == crashAfterDebit {
		die()
	}
	return r, err
}
