package main

import (
	"context"
	"os"
	"syscall"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
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
func crashDrill(at string) func(driver.Store, charge.Debiter) (driver.Store, charge.Debiter) {
	switch at {
	case "":
		return nil
	case crashAfterClaim, crashAfterDebit, crashAfterDone:
		return func(s driver.Store, d charge.Debiter) (driver.Store, charge.Debiter) {
			return crashingStore{s, at}, crashingDebiter{d, at}
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
