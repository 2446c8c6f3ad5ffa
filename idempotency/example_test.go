package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		if errors.Is(err, idempotency.ErrAlreadyFailed) && res.Record.State == driver.StateFailed {
			fmt.Printf("delivery %d: %s (%s)\n", delivery, res.Outcome, res.Record.Detail)
			continue
		}
		if err != nil {
			fmt.Println("retry later:", err)
			continue
		}
		fmt.Printf("delivery %d: %s\n", delivery, res.Outcome)
	}
	// Output:
	// delivery 1: failed
	// delivery 2: duplicate_failed (idempotency: permanent failure: account closed)
}

// A work that fails keeps its key to the end of its lease (the effect may
// have happened), so a retry at once is told ErrInProgress, with when to
// come back; a work that knows nothing happened says so with ErrNotStarted,
// and the retry runs it again at once.
func ExampleNotRunError() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	timeout := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, errors.New("the bank did not answer") // posted or not: unknown
	}
	refused := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, fmt.Errorf("%w: the account number is malformed", idempotency.ErrNotStarted)
	}
	ok := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "DEBITED"}, nil
	}
	for _, key := range []string{"charge-8", "charge-9"} {
		first := timeout
		if key == "charge-9" {
			first = refused
		}
		res, _ := guard.Do(ctx, key, "fp", first, idempotency.DoOptions{})
		fmt.Printf("%s: %s (%v)\n", key, res.Outcome, res.Err)
		res, err := guard.Do(ctx, key, "fp", ok, idempotency.DoOptions{})
		var notRun *idempotency.NotRunError
		if errors.As(err, &notRun) {
			fmt.Printf("%s again: %v, retry after %s\n", key, errors.Is(err, idempotency.ErrInProgress), notRun.RetryAfter.Round(time.Second))
			continue
		}
		fmt.Printf("%s again: %s %s\n", key, res.Outcome, res.Done.Status)
	}
	// Output:
	// charge-8: unfinished (the bank did not answer)
	// charge-8 again: true, retry after 1m2s
	// charge-9: unfinished (idempotency: work not started: the account number is malformed)
	// charge-9 again: reclaimed DEBITED
}
