package idempotency_test

import (
	"context"
	"fmt"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// A webhook that an upstream delivers at least once: the welcome e-mail
// must go out once per signup, however often the event arrives. The key is
// the business id of the event; the fingerprint, a hash of its payload.
func ExampleGuard_Do() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{}) // DynamoDB, SQLite, … in production
	if err != nil {
		panic(err)
	}
	sent := 0
	sendWelcome := func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
		sent++ // the side effect: call the mail API here
		return idempotency.Done{Status: "SENT", Detail: "msg-0001"}, nil
	}
	ctx := context.Background()
	fp := idempotency.Fingerprint("user-42", "welcome")
	for delivery := 1; delivery <= 3; delivery++ {
		res, err := guard.Do(ctx, "signup-user-42", fp, sendWelcome, idempotency.DoOptions{})
		if err != nil { // the store could not be reached: nothing decided
			fmt.Println("retry later:", err)
			continue
		}
		switch res.Outcome {
		case idempotency.Acquired, idempotency.Reclaimed, idempotency.DuplicateDone:
			fmt.Printf("delivery %d: %s, %s %s\n", delivery, res.Outcome, res.Done.Status, res.Done.Detail)
		case idempotency.DuplicateInProgress, idempotency.Unfinished:
			fmt.Println("not done yet; retry after", res.RetryAfter)
		default: // Failed, DuplicateFailed, Conflict, LeaseLost
			fmt.Println("will not run:", res.Outcome)
		}
	}
	fmt.Println("e-mails sent:", sent)
	// Output:
	// delivery 1: acquired, SENT msg-0001
	// delivery 2: duplicate_done, SENT msg-0001
	// delivery 3: duplicate_done, SENT msg-0001
	// e-mails sent: 1
}

// A failure marked ErrPermanent is recorded FAILED, and a later delivery
// finds the record instead of running the work again: its state is one of
// package driver's (driver.StateFailed), its detail the error's text.
func ExampleDoResult_record() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		panic(err)
	}
	decline := func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, fmt.Errorf("%w: account closed", idempotency.ErrPermanent)
	}
	ctx := context.Background()
	for delivery := 1; delivery <= 2; delivery++ {
		res, err := guard.Do(ctx, "charge-7", idempotency.Fingerprint("charge-7"), decline, idempotency.DoOptions{})
		if err != nil {
			fmt.Println("retry later:", err)
			continue
		}
		if res.Outcome == idempotency.DuplicateFailed && res.Record.State == driver.StateFailed {
			fmt.Printf("delivery %d: %s (%s)\n", delivery, res.Outcome, res.Record.Detail)
			continue
		}
		fmt.Printf("delivery %d: %s\n", delivery, res.Outcome)
	}
	// Output:
	// delivery 1: failed
	// delivery 2: duplicate_failed (idempotency: permanent failure: account closed)
}
