package main

import (
	"context"
	"os"
	"syscall"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The crash points of --crash-at: the process SIGKILLs itself right after
// that step succeeds, to prove what happens in each crash window. For tests
// and drills only.
const (
	crashAfterClaim = "after-claim" // claimed, nothing debited
	crashAfterDebit = "after-debit" // debited, DONE not recorded
	crashAfterDone  = "after-done"  // DONE recorded, message not acked
)

func validCrashPoint(s string) bool {
	switch s {
	case "", crashAfterClaim, crashAfterDebit, crashAfterDone:
		return true
	}
	return false
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

// withCrashes wraps the store and the debiter for --crash-at (no-op when
// at is empty).
func withCrashes(at string, s driver.Store, d charge.Debiter) (driver.Store, charge.Debiter) {
	if at == "" {
		return s, d
	}
	return crashingStore{s, at}, crashingDebiter{d, at}
}
