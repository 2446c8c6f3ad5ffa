package charge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

const lease = 30 * time.Second

type fixture struct {
	svc    *charge.Service
	guard  *idempotency.Guard
	store  *flakyStore
	clock  *storetest.Clock
	ledger *ledger
	notes  *notifier
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{
		store:  &flakyStore{Store: memstore.New()},
		clock:  storetest.NewClock(storetest.Epoch),
		ledger: newLedger(),
		notes:  &notifier{},
	}
	g, err := idempotency.NewGuard(f.store, idempotency.Options{Lease: lease, Clock: f.clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	f.guard = g
	f.svc, err = charge.NewService(charge.Options{Guard: g, Debiter: f.ledger, Notifier: f.notes, FinishTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) record(t *testing.T, id string) driver.Record {
	t.Helper()
	r, err := f.guard.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return r
}

func smsFee(id string) charge.Charge {
	return charge.Charge{
		ID: id, AccountID: "001234567890",
		Amount:  charge.Money{Minor: 2500, Currency: "INR"},
		Type:    charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),
	}
}

func wantOutcome(t *testing.T, got charge.Result, want charge.Outcome) {
	t.Helper()
	if got.Outcome != want {
		t.Fatalf("outcome = %v (%s), want %v", got.Outcome, got.Reason, want)
	}
}

// failFirstDebit makes the bank answer the first debit with err and post
// every later one.
func (f *fixture) failFirstDebit(err error) {
	f.ledger.fail = func(_ charge.DebitRequest, call int) error {
		if call == 1 {
			return err
		}
		return nil
	}
}

// wantPostedOnSecondAttempt delivers c again and wants it processed on its
// second attempt with one entry at the bank.
func (f *fixture) wantPostedOnSecondAttempt(t *testing.T, c charge.Charge) {
	t.Helper()
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	if res.Attempt != 2 || f.ledger.posted(c.ID) != 1 {
		t.Fatalf("attempt %d, entries %d; want 2 and 1", res.Attempt, f.ledger.posted(c.ID))
	}
}

func TestFirstDeliveryDebitsNotifiesAndRecordsDone(t *testing.T) {
	f := newFixture(t)
	res := f.svc.Process(t.Context(), smsFee("CHG-1"), nil)
	wantOutcome(t, res, charge.Processed)
	if res.Status != charge.Debited || res.Reference != "TXN-CHG-1" || res.Attempt != 1 {
		t.Fatalf("result = %+v", res)
	}
	if f.ledger.posted("CHG-1") != 1 || f.notes.count() != 1 {
		t.Fatalf("ledger entries %d, notifications %d; want 1 and 1", f.ledger.posted("CHG-1"), f.notes.count())
	}
	r := f.record(t, "CHG-1")
	if r.State != driver.StateDone || r.Status != string(charge.Debited) || r.Detail != "TXN-CHG-1" {
		t.Fatalf("record = %+v", r)
	}
	got := f.ledger.entries["CHG-1"]
	if got.IdempotencyKey != "CHG-1" || got.Amount != (charge.Money{Minor: 2500, Currency: "INR"}) || got.AccountID != "001234567890" {
		t.Fatalf("debit request = %+v: the charge id must be the idempotency key", got)
	}
}

func TestDuplicateDeliveryIsDroppedNotDebited(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-DUP")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	for range 3 {
		f.clock.Advance(24 * time.Hour) // SQS redelivers a day later
		res := f.svc.Process(t.Context(), c, nil)
		wantOutcome(t, res, charge.DuplicateDone)
		if res.Status != charge.Debited || res.Reference != "TXN-CHG-DUP" {
			t.Fatalf("duplicate result = %+v, want the recorded status and reference", res)
		}
	}
	if calls := f.ledger.callsFor("CHG-DUP"); calls != 1 {
		t.Fatalf("core banking called %d times, want 1", calls)
	}
	if f.notes.count() != 1 {
		t.Fatalf("notifications = %d, want 1", f.notes.count())
	}
}

// stuckInDebit processes c in the background (beating hb, if any) and
// returns once its debit has reached the bank, which answers only when
// f.ledger.gate is closed (or the debit's context ends); the result comes
// on the channel.
func (f *fixture) stuckInDebit(c charge.Charge, hb idempotency.Heartbeat) <-chan charge.Result {
	f.ledger.gate = make(chan struct{})
	f.ledger.entered = make(chan string, 1)
	done := make(chan charge.Result, 1)
	go func() { done <- f.svc.Process(context.Background(), c, hb) }()
	<-f.ledger.entered
	return done
}

func TestInFlightDuplicateIsNotAcked(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-INFLIGHT")
	first := f.stuckInDebit(c, nil) // the first delivery is debiting

	f.clock.Advance(10 * time.Second)
	dup := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, dup, charge.DuplicateInProgress)
	if dup.RetryAfter != lease-10*time.Second {
		t.Fatalf("RetryAfter = %v, want the rest of the lease %v", dup.RetryAfter, lease-10*time.Second)
	}
	close(f.ledger.gate)
	wantOutcome(t, <-first, charge.Processed)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateDone)
	if calls := f.ledger.callsFor(c.ID); calls != 1 {
		t.Fatalf("core banking called %d times, want 1", calls)
	}
}

func TestExpiredLeaseIsReclaimedAndDebitedOnce(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-CRASH")
	// A worker claimed and died before debiting.
	if _, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil)); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateInProgress)
	f.clock.Advance(lease)
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	if res.Attempt != 2 {
		t.Fatalf("attempt = %d, want 2", res.Attempt)
	}
	if r := f.record(t, c.ID); r.State != driver.StateDone || r.Attempt != 2 {
		t.Fatalf("record = %+v", r)
	}
	if f.ledger.total() != 1 {
		t.Fatalf("ledger entries = %d, want 1", f.ledger.total())
	}
}

func TestCrashAfterDebitBeforeDoneIsSafeAtTheBoundary(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-WINDOW")
	// A worker claimed, debited, and died before recording DONE.
	if _, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.Debit(t.Context(), charge.DebitRequest{IdempotencyKey: c.ID, AccountID: c.AccountID, Amount: c.Amount}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(lease)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if f.ledger.callsFor(c.ID) != 2 || f.ledger.posted(c.ID) != 1 {
		t.Fatalf("calls %d, entries %d: want the retry to reach core banking and post nothing new",
			f.ledger.callsFor(c.ID), f.ledger.posted(c.ID))
	}
}

func TestPermanentDebitFailureRecordsFailedAndDeadLetters(t *testing.T) {
	f := newFixture(t)
	f.ledger.fail = func(charge.DebitRequest, int) error {
		return &charge.DeclineError{Code: "INSUFFICIENT_FUNDS", Message: "balance below fee"}
	}
	c := smsFee("CHG-DECLINED")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.DebitFailed)
	if res.Status != charge.Failed || res.Reason == "" {
		t.Fatalf("result = %+v", res)
	}
	r := f.record(t, c.ID)
	if r.State != driver.StateFailed || r.Status != string(charge.Failed) || r.Detail != res.Reason {
		t.Fatalf("record = %+v", r)
	}
	f.clock.Advance(time.Hour)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateFailed)
	if f.ledger.total() != 0 || f.ledger.callsFor(c.ID) != 1 || f.notes.count() != 0 {
		t.Fatalf("entries %d calls %d notes %d; want 0, 1, 0", f.ledger.total(), f.ledger.callsFor(c.ID), f.notes.count())
	}
}

func TestAmbiguousDebitFailureKeepsTheLeaseAndDebitsOnce(t *testing.T) {
	f := newFixture(t)
	f.failFirstDebit(errors.New("core banking: 503 service unavailable")) // may have posted
	c := smsFee("CHG-FLAKY")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.RetryLater)
	if res.RetryAfter != lease {
		t.Fatalf("RetryAfter = %s, want the rest of the kept lease %s", res.RetryAfter, lease)
	}
	r := f.record(t, c.ID)
	if r.State != driver.StateInProgress || !r.LeaseUntil.Equal(f.clock.Now().Add(lease)) {
		t.Fatalf("after an answer that may have posted the record is %+v, want IN_PROGRESS under a live lease (never FAILED)", r)
	}
	// The claim is kept: a redelivery during the lease does not post again
	// while the first request may still be running at the bank.
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateInProgress)
	if f.ledger.callsFor(c.ID) != 1 {
		t.Fatalf("bank calls = %d during the kept lease, want 1", f.ledger.callsFor(c.ID))
	}
	f.clock.Advance(lease)
	f.wantPostedOnSecondAttempt(t, c)
}

func TestUnsentDebitGivesTheLeaseUpAtOnce(t *testing.T) {
	f := newFixture(t)
	f.failFirstDebit(&charge.BankError{Kind: charge.BankUnavailable, NotSent: true, Err: errors.New("connection refused")})
	c := smsFee("CHG-REFUSED")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.RetryLater)
	if res.RetryAfter != 0 {
		t.Fatalf("RetryAfter = %s, want 0 (the runtime's backoff): nothing can be posting", res.RetryAfter)
	}
	// The request never reached the bank: the next delivery reclaims at once.
	f.wantPostedOnSecondAttempt(t, c)
}

func TestRejectedRequestAlertsAndIsNeverFinal(t *testing.T) {
	f := newFixture(t)
	f.failFirstDebit(&charge.BankError{Kind: charge.BankRejected, Status: 401, Code: "UNAUTHORIZED"})
	c := smsFee("CHG-401")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.RetryLater)
	if !res.Alert {
		t.Fatal("a 401 did not raise an alert")
	}
	if r := f.record(t, c.ID); r.State != driver.StateInProgress {
		t.Fatalf("record after a 401 = %s, want IN_PROGRESS (a 401 is never FAILED)", r.State)
	}
	f.clock.Advance(lease)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if f.ledger.posted(c.ID) != 1 {
		t.Fatalf("entries %d, want 1", f.ledger.posted(c.ID))
	}
}

// enquirer answers status enquiries from a fixed table.
type enquirer struct {
	mu      sync.Mutex
	answers map[string]charge.Enquiry
	err     error
	asked   int
}

func (e *enquirer) Enquire(_ context.Context, key string) (charge.Enquiry, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked++
	if e.err != nil {
		return charge.Enquiry{}, e.err
	}
	if a, ok := e.answers[key]; ok {
		return a, nil
	}
	return charge.Enquiry{State: charge.DebitNotFound}, nil
}

func TestReclaimAsksTheBankBeforePostingAgain(t *testing.T) {
	tests := []struct {
		name       string
		answer     charge.Enquiry
		enqErr     error
		want       charge.Outcome
		wantCalls  int // debit calls on the reclaim
		wantState  driver.State
		wantDetail string
	}{
		{"posted: DONE with the bank's reference, no second post",
			charge.Enquiry{State: charge.DebitPosted, Reference: "CBS-FIRST"}, nil, charge.Processed, 0, driver.StateDone, "CBS-FIRST"},
		{"in progress: wait under the lease",
			charge.Enquiry{State: charge.DebitInProgress}, nil, charge.RetryLater, 0, driver.StateInProgress, ""},
		{"not found: post",
			charge.Enquiry{State: charge.DebitNotFound}, nil, charge.Processed, 1, driver.StateDone, "TXN-CHG-ENQ"},
		{"declined: FAILED without posting",
			charge.Enquiry{State: charge.DebitDeclined, Decline: &charge.DeclineError{Code: "ACCOUNT_CLOSED"}}, nil, charge.DebitFailed, 0, driver.StateFailed, ""},
		{"enquiry fails: not final, no post",
			charge.Enquiry{}, &charge.BankError{Kind: charge.BankUnavailable, Status: 503}, charge.RetryLater, 0, driver.StateInProgress, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			enq := &enquirer{answers: map[string]charge.Enquiry{"CHG-ENQ": tt.answer}, err: tt.enqErr}
			svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, Enquirer: enq})
			if err != nil {
				t.Fatal(err)
			}
			c := smsFee("CHG-ENQ")
			// A first attempt that died after claiming (its debit may have posted).
			first, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil))
			if err != nil || first.Outcome != idempotency.Acquired {
				t.Fatal(first.Outcome, err)
			}
			f.clock.Advance(lease)
			res := svc.Process(t.Context(), c, nil)
			wantOutcome(t, res, tt.want)
			if enq.asked != 1 || f.ledger.callsFor(c.ID) != tt.wantCalls {
				t.Fatalf("enquiries %d, debit calls %d; want 1 and %d", enq.asked, f.ledger.callsFor(c.ID), tt.wantCalls)
			}
			r := f.record(t, c.ID)
			if r.State != tt.wantState || (tt.wantDetail != "" && r.Detail != tt.wantDetail) {
				t.Fatalf("record = %+v, want state %s detail %q", r, tt.wantState, tt.wantDetail)
			}
			if tt.want == charge.RetryLater && (res.RetryAfter != lease || !r.LeaseUntil.After(f.clock.Now())) {
				t.Fatalf("RetryAfter %s, lease until %v: the claim must be kept", res.RetryAfter, r.LeaseUntil)
			}
		})
	}
}

func TestFirstClaimDoesNotAskTheBank(t *testing.T) {
	f := newFixture(t)
	enq := &enquirer{}
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, Enquirer: enq})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, svc.Process(t.Context(), smsFee("CHG-NEW"), nil), charge.Processed)
	if enq.asked != 0 {
		t.Fatalf("a first claim made %d status enquiries, want 0 (it costs a round trip for nothing)", enq.asked)
	}
}

func TestTimedOutDebitIsRetryableNotFailed(t *testing.T) {
	f := newFixture(t)
	f.ledger.gate = make(chan struct{}) // never answers
	c := smsFee("CHG-TIMEOUT")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	wantOutcome(t, f.svc.Process(ctx, c, nil), charge.RetryLater)
	if r := f.record(t, c.ID); r.State != driver.StateInProgress {
		t.Fatalf("record state %s, want IN_PROGRESS", r.State)
	}
}

func TestNotificationFailureKeepsTheDebitAndIsNotRetried(t *testing.T) {
	f := newFixture(t)
	f.notes.err = errors.New("sms gateway down")
	c := smsFee("CHG-NONOTE")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	if res.Status != charge.DebitedNotificationFailed {
		t.Fatalf("status = %s, want DEBITED_NOTIFICATION_FAILED", res.Status)
	}
	r := f.record(t, c.ID)
	if r.State != driver.StateDone || r.Status != string(charge.DebitedNotificationFailed) {
		t.Fatalf("record = %+v", r)
	}
	f.notes.err = nil
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateDone)
	if f.ledger.callsFor(c.ID) != 1 || f.ledger.posted(c.ID) != 1 {
		t.Fatalf("debit calls %d entries %d; want exactly 1 and 1 (neither retried nor reversed)",
			f.ledger.callsFor(c.ID), f.ledger.posted(c.ID))
	}
}

func TestStaleWorkerIsFencedAndDoesNotAck(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-STALE")
	stale := f.stuckInDebit(c, nil) // worker A is stuck in the debit

	f.clock.Advance(lease + time.Second) // A's lease expires
	f.ledger.mu.Lock()
	gate := f.ledger.gate
	f.ledger.gate = nil // worker B's debit answers at once
	f.ledger.mu.Unlock()
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	owner := f.record(t, c.ID)

	close(gate) // A's debit returns (core banking replays the same result)
	res = <-stale
	wantOutcome(t, res, charge.LeaseLost)
	if !errors.Is(res.Err, idempotency.ErrLeaseLost) {
		t.Fatalf("stale err = %v", res.Err)
	}
	if r := f.record(t, c.ID); r.Token != owner.Token || r.State != driver.StateDone || r.Attempt != 2 {
		t.Fatalf("record after the stale worker finished = %+v, want the owner's DONE record %+v", r, owner)
	}
	if f.ledger.posted(c.ID) != 1 {
		t.Fatalf("ledger entries = %d, want 1", f.ledger.posted(c.ID))
	}
}

func TestConflictingPayloadIsNeverDebited(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-REUSED")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	other := c
	other.Amount.Minor = 250000 // same id, a hundred times the amount
	res := f.svc.Process(t.Context(), other, nil)
	wantOutcome(t, res, charge.Conflict)
	if res.Reason == "" {
		t.Fatal("a conflict needs a reason for the DLQ")
	}
	if f.ledger.callsFor(c.ID) != 1 || f.ledger.entries[c.ID].Amount.Minor != 2500 {
		t.Fatalf("calls %d, posted %+v: the conflicting payload reached core banking", f.ledger.callsFor(c.ID), f.ledger.entries[c.ID])
	}
	// A conflict against a claim still in flight is refused too.
	f2 := newFixture(t)
	if _, err := f2.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil)); err != nil {
		t.Fatal(err)
	}
	f2.clock.Advance(2 * lease)
	wantOutcome(t, f2.svc.Process(t.Context(), other, nil), charge.Conflict)
	if f2.ledger.total() != 0 {
		t.Fatal("conflicting payload debited after the first claim's lease expired")
	}
}

func TestFiftyConcurrentDeliveriesDebitOnce(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-RACE")
	var wg sync.WaitGroup
	results := make(chan charge.Result, 50)
	start := make(chan struct{})
	for range 50 {
		wg.Go(func() {
			<-start
			results <- f.svc.Process(t.Context(), c, nil)
		})
	}
	close(start)
	wg.Wait()
	close(results)
	counts := map[charge.Outcome]int{}
	for r := range results {
		counts[r.Outcome]++
	}
	if counts[charge.Processed] != 1 || counts[charge.Processed]+counts[charge.DuplicateInProgress]+counts[charge.DuplicateDone] != 50 {
		t.Fatalf("outcomes = %v, want exactly one processed and the rest duplicates", counts)
	}
	if calls := f.ledger.callsFor(c.ID); calls != 1 {
		t.Fatalf("core banking called %d times, want exactly 1", calls)
	}
}

func TestStoreUnavailableMeansNoDebitNoAck(t *testing.T) {
	f := newFixture(t)
	f.store.failClaims = 1
	c := smsFee("CHG-NOSTORE")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.RetryLater)
	if !errors.Is(res.Err, idempotency.ErrUnavailable) || f.ledger.callsFor(c.ID) != 0 {
		t.Fatalf("err %v, debit calls %d; want ErrUnavailable and none", res.Err, f.ledger.callsFor(c.ID))
	}
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
}

func TestRecordingDoneRetriesThroughABriefStoreOutage(t *testing.T) {
	f := newFixture(t)
	f.store.failFinishes = 2 // the third try succeeds
	c := smsFee("CHG-BLIP")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if r := f.record(t, c.ID); r.State != driver.StateDone {
		t.Fatalf("record = %+v", r)
	}
}

func TestRecordingDoneGivesUpWithoutAckingWhenTheStoreStaysDown(t *testing.T) {
	f := newFixture(t)
	f.store.failFinishes = 100
	c := smsFee("CHG-DOWN")
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.RetryLater)
	f.store.failFinishes = 0
	f.clock.Advance(lease)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if f.ledger.posted(c.ID) != 1 || f.ledger.callsFor(c.ID) != 2 {
		t.Fatalf("entries %d calls %d; want 1 entry from 2 calls", f.ledger.posted(c.ID), f.ledger.callsFor(c.ID))
	}
}

func TestHeartbeatExtendsTheLeaseDuringASlowDebit(t *testing.T) {
	f := newFixture(t)
	hb := &heartbeat{}
	c := smsFee("CHG-SLOW")
	done := f.stuckInDebit(c, hb)
	for range 4 { // two full leases pass while the debit runs
		f.clock.Advance(lease / 2)
		for _, err := range hb.fire(t.Context()) {
			if err != nil {
				t.Fatalf("beat: %v", err)
			}
		}
	}
	if r := f.record(t, c.ID); !r.LeaseUntil.Equal(f.clock.Now().Add(lease)) {
		t.Fatalf("LeaseUntil = %v, want %v", r.LeaseUntil, f.clock.Now().Add(lease))
	}
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateInProgress)
	close(f.ledger.gate)
	wantOutcome(t, <-done, charge.Processed)
	if errs := hb.fire(t.Context()); len(errs) != 0 {
		t.Fatalf("beat still registered after Process returned")
	}
}

func TestHeartbeatKeepsBeatingThroughATransientExtendError(t *testing.T) {
	f := newFixture(t)
	hb := &heartbeat{}
	c := smsFee("CHG-BEAT")
	done := f.stuckInDebit(c, hb)
	f.store.mu.Lock()
	f.store.failExtends = 1
	f.store.mu.Unlock()
	f.clock.Advance(lease / 2)
	if errs := hb.fire(t.Context()); len(errs) != 1 || !errors.Is(errs[0], idempotency.ErrUnavailable) {
		t.Fatalf("first beat errors = %v, want one ErrUnavailable", errs)
	}
	f.clock.Advance(lease / 4)
	if errs := hb.fire(t.Context()); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("second beat = %v: the beat must survive a transient error and extend", errs)
	}
	if r := f.record(t, c.ID); !r.LeaseUntil.Equal(f.clock.Now().Add(lease)) {
		t.Fatalf("LeaseUntil = %v, want %v (renewed after the transient error)", r.LeaseUntil, f.clock.Now().Add(lease))
	}
	// Past the original lease: nobody may reclaim.
	f.clock.Advance(lease / 2)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateInProgress)
	close(f.ledger.gate)
	wantOutcome(t, <-done, charge.Processed)
	if f.ledger.callsFor(c.ID) != 1 || f.ledger.posted(c.ID) != 1 {
		t.Fatalf("debit calls %d, entries %d; want one debit", f.ledger.callsFor(c.ID), f.ledger.posted(c.ID))
	}
}

func TestLostLeaseCancelsTheWork(t *testing.T) {
	f := newFixture(t)
	hb := &heartbeat{}
	c := smsFee("CHG-TAKEN")
	done := f.stuckInDebit(c, hb) // answers only when the ctx ends
	// Another worker takes the charge over (the lease passed unrenewed).
	f.clock.Advance(lease)
	other, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(nil))
	if err != nil || other.Outcome != idempotency.Reclaimed {
		t.Fatal(other.Outcome, err)
	}
	if errs := hb.fire(t.Context()); len(errs) != 1 || !errors.Is(errs[0], idempotency.ErrLeaseLost) {
		t.Fatalf("beat = %v, want ErrLeaseLost", errs)
	}
	select {
	case res := <-done:
		wantOutcome(t, res, charge.LeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the debit was not cancelled when the lease was lost")
	}
	if r := f.record(t, c.ID); r.Token != other.Record.Token || r.State != driver.StateInProgress {
		t.Fatalf("the old worker wrote over the new owner: %+v", r)
	}
}

// hangingNotifier never answers and ignores its context.
type hangingNotifier struct{ release chan struct{} }

func (n hangingNotifier) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	<-n.release
	return nil
}

func TestHangingNotifierTimesOutAsANotificationFailure(t *testing.T) {
	f := newFixture(t)
	n := hangingNotifier{release: make(chan struct{})}
	defer close(n.release)
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: n, NotifyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := smsFee("CHG-HANG")
	res := svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	if res.Status != charge.DebitedNotificationFailed {
		t.Fatalf("status = %s, want %s", res.Status, charge.DebitedNotificationFailed)
	}
	r := f.record(t, c.ID)
	if r.State != driver.StateDone || r.Status != string(charge.DebitedNotificationFailed) || f.ledger.callsFor(c.ID) != 1 {
		t.Fatalf("record %+v, debit calls %d; want DONE DEBITED_NOTIFICATION_FAILED after one debit", r, f.ledger.callsFor(c.ID))
	}
}

// flakyStore fails the first N claims, finishes or extends with
// ErrUnavailable.
type flakyStore struct {
	driver.Store
	mu           sync.Mutex
	failClaims   int
	failFinishes int
	failExtends  int
}

// take uses up one of the failures *n counts, if any are left.
func (s *flakyStore) take(n *int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *n <= 0 {
		return false
	}
	*n--
	return true
}

func (s *flakyStore) Extend(ctx context.Context, req driver.ExtendRequest) error {
	if s.take(&s.failExtends) {
		return driver.Unavailable("extend", errors.New("throttled"))
	}
	return s.Store.Extend(ctx, req)
}

func (s *flakyStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if s.take(&s.failClaims) {
		return driver.ClaimResult{}, driver.Unavailable("claim", errors.New("connection refused"))
	}
	return s.Store.Claim(ctx, req)
}

func (s *flakyStore) Finish(ctx context.Context, f driver.FinishRequest) error {
	if s.take(&s.failFinishes) {
		return driver.Unavailable("finish", errors.New("throttled"))
	}
	return s.Store.Finish(ctx, f)
}

func TestBankKeyPerGeneration(t *testing.T) {
	for _, tt := range []struct {
		id   string
		gen  int
		want string
	}{
		{"CHG-1", 0, "CHG-1"}, {"CHG-1", 1, "CHG-1"}, {"CHG-1", 2, "CHG-1~2"}, {"CHG/2026/11/7", 12, "CHG/2026/11/7~12"},
	} {
		if got := charge.BankKey(tt.id, tt.gen); got != tt.want {
			t.Errorf("BankKey(%q, %d) = %q, want %q", tt.id, tt.gen, got, tt.want)
		}
	}
	// No generation's key is another charge's id: the separator is outside
	// the wire format's alphabet.
	body := []byte(`{"schemaVersion":1,"chargeId":"CHG-1~2","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`)
	if _, err := charge.ParseEvent(body); err == nil {
		t.Fatal("a charge id holding the generation separator was accepted")
	}
}

func TestOnlyAnExplicitDeclineGetsANewGeneration(t *testing.T) {
	decline := &charge.DeclineError{Code: "INSUFFICIENT_FUNDS", Message: "balance too low"}
	for _, tt := range []struct {
		name string
		rec  driver.Record
		ok   bool
	}{
		{"FAILED by a decline", driver.Record{State: driver.StateFailed, Detail: decline.Error()}, true},
		{"FAILED by the last decline of a schedule that ran out", driver.Record{State: driver.StateFailed,
			Detail: (&charge.RetriesExhaustedError{Decline: decline}).Error(), History: []string{"generation 1: declined INSUFFICIENT_FUNDS at 2026-12-01T10:00:00Z; retries exhausted: 1 of 1 debit attempts made"}}, true},
		{"FAILED text that only mentions a schedule", driver.Record{State: driver.StateFailed, Detail: "retries_exhausted: corebank: x"}, false},
		{"WAITING for a retry", driver.Record{State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Detail: "next attempt at 2026-12-02T10:00:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)"}, false},
		{"FAILED by a permanent error of ours", driver.Record{State: driver.StateFailed, Detail: "corebank: missing idempotency key"}, false},
		{"FAILED text that only mentions a decline", driver.Record{State: driver.StateFailed, Detail: "x: debit declined: R"}, false},
		{"DONE", driver.Record{State: driver.StateDone, Detail: decline.Error()}, false},
		{"FAILED by a hard decline (closed account)", driver.Record{State: driver.StateFailed,
			Detail: (&charge.DeclineError{Code: "ACCOUNT_CLOSED", Message: "declined by core banking: account ****1001"}).Error()}, false},
		{"FAILED by a hard decline without a message", driver.Record{State: driver.StateFailed, Detail: (&charge.DeclineError{Code: "MANDATE_CANCELLED"}).Error()}, false},
		{"IN_PROGRESS after an ambiguous answer", driver.Record{State: driver.StateInProgress}, false},
	} {
		if err := charge.EligibleForNewGeneration(tt.rec); (err == nil) != tt.ok {
			t.Errorf("%s: %v, want eligible=%v", tt.name, err, tt.ok)
		}
	}
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, idempotency.MinFingerprintKey) }

func fingerprinter(t *testing.T, current []byte, previous ...[]byte) *idempotency.Fingerprinter {
	t.Helper()
	f, err := idempotency.NewFingerprinter(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// service is a Service over f's store, ledger and clock, with its own keys.
func (f *fixture) service(t *testing.T, keys *idempotency.Fingerprinter) *charge.Service {
	t.Helper()
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, FinishTimeout: time.Second, Fingerprints: keys})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// With a branch prefix known, an unkeyed fingerprint gives the account
// number away by trying every suffix; a keyed one does not, without the
// key. The record holds only the keyed one.
func TestAKeyedFingerprintDoesNotGiveTheAccountAway(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-FP-1")
	c.AccountID = "0012340" + "56789"
	wantOutcome(t, f.service(t, fingerprinter(t, key(1))).Process(t.Context(), c, nil), charge.Processed)
	stored := f.record(t, c.ID).Fingerprint
	guess := func(fp string) (string, bool) {
		for n := range 100_000 {
			g := c
			g.AccountID = fmt.Sprintf("0012340%05d", n)
			if g.Fingerprint(nil) == fp {
				return g.AccountID, true
			}
		}
		return "", false
	}
	if acct, found := guess(c.Fingerprint(nil)); !found || acct != c.AccountID {
		t.Fatalf("the guessing does not work on an unkeyed fingerprint (%q): the test proves nothing", acct)
	}
	if acct, found := guess(stored); found {
		t.Errorf("the stored fingerprint %.16s… gave the account %s away", stored, acct)
	}
	if prefix := "hs256:" + fingerprinter(t, key(1)).KeyID() + ":"; !strings.HasPrefix(stored, prefix) {
		t.Errorf("stored fingerprint %.16s… does not name its key (want it to begin %s)", stored, prefix)
	}
}

// A key rotation turns no duplicate into a conflict and no conflict into a
// duplicate: a record written under the previous key (or under none, before
// keys) is compared under the key that wrote it — DONE stays a duplicate,
// an expired claim is reclaimed and debited once, another payload is still
// a conflict; a key not held is a conflict that says so, never a debit.
func TestRotatingTheFingerprintKeyKeepsDuplicatesDuplicates(t *testing.T) {
	oldKey, newKey := key(1), key(2)
	before := fingerprinter(t, oldKey)
	during := fingerprinter(t, newKey, oldKey)
	after := fingerprinter(t, newKey)
	for _, tc := range []struct {
		name    string
		written *idempotency.Fingerprinter // nil: unkeyed, before keys
		reader  *idempotency.Fingerprinter
		other   bool // the redelivery carries another payload
		crashed bool // the first worker died holding the claim
		want    charge.Outcome
		debits  int
	}{
		{name: "DONE under the previous key", written: before, reader: during, want: charge.DuplicateDone, debits: 1},
		{name: "DONE before keys", written: nil, reader: during, want: charge.DuplicateDone, debits: 1},
		{name: "a claim under the previous key whose worker died", written: before, reader: during, crashed: true, want: charge.Processed, debits: 1},
		{name: "another payload under the previous key", written: before, reader: during, other: true, want: charge.Conflict, debits: 1},
		{name: "another payload before keys", written: nil, reader: during, other: true, want: charge.Conflict, debits: 1},
		{name: "the previous key dropped too early", written: before, reader: after, want: charge.Conflict, debits: 1},
		{name: "DONE under the current key", written: after, reader: during, want: charge.DuplicateDone, debits: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := smsFee("CHG-ROT")
			if tc.crashed {
				if _, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(tc.written)); err != nil {
					t.Fatal(err)
				}
				f.clock.Advance(lease)
			} else {
				wantOutcome(t, f.service(t, tc.written).Process(t.Context(), c, nil), charge.Processed)
			}
			again := c
			if tc.other {
				again.Amount.Minor++
			}
			res := f.service(t, tc.reader).Process(t.Context(), again, nil)
			wantOutcome(t, res, tc.want)
			if got := f.ledger.total(); got != tc.debits {
				t.Errorf("%d debits, want %d", got, tc.debits)
			}
			if tc.name == "the previous key dropped too early" && !strings.Contains(res.Reason, "key this process does not hold") {
				t.Errorf("reason %q does not say the key is missing", res.Reason)
			}
			if r := f.record(t, c.ID); tc.crashed && (r.State != driver.StateDone || r.Attempt != 2) {
				t.Errorf("record %s attempt %d, want DONE at attempt 2", r.State, r.Attempt)
			}
		})
	}
}

func TestAShortFingerprintKeyIsRefused(t *testing.T) {
	if _, err := idempotency.NewFingerprinter([]byte("too short")); err == nil {
		t.Error("a 9-byte key was accepted")
	}
	if _, err := idempotency.NewFingerprinter(key(1), []byte("short")); err == nil {
		t.Error("a short previous key was accepted")
	}
}

func TestLongestWaits(t *testing.T) {
	const h = time.Hour
	rules := func(s string) []charge.RetryRule {
		r, err := charge.ParseRetryRules(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		p    *charge.RetryPolicy
		want []time.Duration
	}{
		{"none", nil, nil},
		{"72h×3, default jitter", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=72h×3")},
			[]time.Duration{79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second}},
		{"capped by the attempts, longest first", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=24h×3,LIMIT_EXCEEDED=48h×2"), MaxAttempts: 3, Jitter: charge.NoJitter},
			[]time.Duration{48*h + time.Second, 48*h + time.Second}},
		{"capped by the window", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=72h×3"), Window: 100 * h, Jitter: charge.NoJitter},
			[]time.Duration{72*h + time.Second, 28*h - time.Second}},
		{"refused policy", &charge.RetryPolicy{Rules: rules("INSUFFICIENT_FUNDS=72h×3"), Window: time.Hour}, nil},
	} {
		if got := tc.p.LongestWaits(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// advance records the advance notices it accepts, and every attempt by
// key; err, when set, fails them; hang, when set, never answers.
type advance struct {
	mu       sync.Mutex
	sent     []charge.AdvanceNotice
	attempts map[string]int
	err      error
	hang     chan struct{}
}

func (a *advance) NotifyAdvance(_ context.Context, n charge.AdvanceNotice) error {
	a.mu.Lock()
	if a.attempts == nil {
		a.attempts = map[string]int{}
	}
	a.attempts[n.NotificationKey]++
	err, hang := a.err, a.hang
	a.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, n)
	return nil
}

func (a *advance) notices() []charge.AdvanceNotice {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.sent)
}

func (a *advance) tries(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[key]
}

const lead = 24 * time.Hour

// noticeFirst is a fixture in notice-first mode with a 24h lead (and
// retry, when set).
func noticeFirst(t *testing.T, retry *charge.RetryPolicy) (*fixture, *advance) {
	t.Helper()
	f := newFixture(t)
	a := &advance{}
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, FinishTimeout: time.Second,
		NoticeLead: lead, AdvanceNotifier: a, Retry: retry, NotifyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	return f, a
}

// The notice goes out first, with what the customer must be told; the
// debit waits for the lead (no delivery before it debits), then posts
// once, with no second notification after it.
func TestTheNoticePrecedesTheDebitByTheLead(t *testing.T) {
	f, a := noticeFirst(t, nil)
	c := smsFee("CHG-NF")
	ctx := t.Context()

	res := f.svc.Process(ctx, c, nil)
	wantOutcome(t, res, charge.Waiting)
	debitAt := storetest.Epoch.Add(lead)
	if res.Status != charge.NoticeSent || !res.NotBefore.Equal(debitAt) ||
		res.Reason != "notice sent at "+at(0)+", debit on or after "+at(lead) {
		t.Fatalf("first delivery: %+v; want NOTICE_SENT, waiting for the lead", res)
	}
	want := charge.AdvanceNotice{Type: "ADVANCE_DEBIT_NOTICE", NotificationKey: "CHG-NF:advance-notice", ChargeID: "CHG-NF", Account: "********7890",
		Amount: charge.NoticeAmt{Minor: 2500, Currency: "INR"}, ChargeType: charge.SMSAlertFee, DueDate: "2026-11-30", DebitOnOrAfter: debitAt,
		Text: "₹25.00 will be debited on or after 2026-12-01 09:00 UTC"}
	if got := a.notices(); len(got) != 1 || got[0] != want {
		t.Fatalf("notices %+v\nwant %+v", got, want)
	}

	for _, d := range []time.Duration{time.Second, lead / 2, lead - time.Millisecond} {
		f.clock.Advance(d - f.clock.Now().Sub(storetest.Epoch))
		res := f.svc.Process(ctx, c, nil)
		wantOutcome(t, res, charge.Waiting)
		if res.Status != charge.NoticeSent || !res.NotBefore.Equal(debitAt) {
			t.Fatalf("a delivery %v after the notice: %+v", d, res)
		}
	}
	if f.ledger.callsFor(c.ID) != 0 || len(a.notices()) != 1 {
		t.Fatalf("before the lead passed: %d debit calls, %d notices; want none and one", f.ledger.callsFor(c.ID), len(a.notices()))
	}

	f.clock.Advance(time.Millisecond)
	res = f.svc.Process(ctx, c, nil)
	wantOutcome(t, res, charge.Processed)
	r := f.record(t, c.ID)
	wantHistory := []string{"notice CHG-NF:advance-notice sent at " + at(0) + "; debit on or after " + at(lead), "generation 1: debited TXN-CHG-NF at " + at(lead)}
	if res.Status != charge.Debited || r.State != driver.StateDone || r.Detail != "TXN-CHG-NF" || !slices.Equal(r.History, wantHistory) {
		t.Fatalf("record %+v\nhistory %q, want DONE DEBITED with %q", r, r.History, wantHistory)
	}
	if f.ledger.posted(c.ID) != 1 || f.ledger.callsFor(c.ID) != 1 || f.notes.count() != 0 || len(a.notices()) != 1 {
		t.Fatalf("entries %d calls %d, notifications after the debit %d, notices %d; want 1, 1, 0, 1",
			f.ledger.posted(c.ID), f.ledger.callsFor(c.ID), f.notes.count(), len(a.notices()))
	}
}

// No notice, no debit: a notice the channel refused, or did not answer in
// time, leaves the charge undebited, its claim given up at once; the next
// delivery sends it again (the same key) and only then waits the lead.
func TestAFailedNoticeBlocksTheDebit(t *testing.T) {
	for _, tt := range []struct {
		name string
		fail func(a *advance)
	}{
		{"refused", func(a *advance) { a.err = errors.New("sms gateway: 503") }},
		{"no answer", func(a *advance) { a.hang = make(chan struct{}) }}, // released when the test ends
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, a := noticeFirst(t, nil)
			tt.fail(a)
			c := smsFee("CHG-NN")
			res := f.svc.Process(t.Context(), c, nil)
			wantOutcome(t, res, charge.RetryLater)
			var ne *charge.NoticeError
			if !errors.As(res.Err, &ne) || ne.Key != "CHG-NN:advance-notice" || !errors.Is(res.Err, idempotency.ErrNotStarted) ||
				res.RetryAfter != 0 || res.Reason != res.Err.Error() {
				t.Fatalf("result %+v; want a NoticeError, the lease given up", res)
			}
			r := f.record(t, c.ID)
			if r.State != driver.StateInProgress || r.LeaseUntil.After(f.clock.Now()) || len(r.History) != 0 {
				t.Fatalf("record %+v; want IN_PROGRESS, the lease given up, nothing in the history", r)
			}
			if f.ledger.callsFor(c.ID) != 0 || len(a.notices()) != 0 {
				t.Fatal("debited without a notice")
			}

			a.mu.Lock()
			if hang := a.hang; hang != nil {
				t.Cleanup(func() { close(hang) })
			}
			a.err, a.hang = nil, nil
			a.mu.Unlock()
			res = f.svc.Process(t.Context(), c, nil)
			wantOutcome(t, res, charge.Waiting)
			if a.tries("CHG-NN:advance-notice") != 2 || len(a.notices()) != 1 || f.ledger.callsFor(c.ID) != 0 {
				t.Fatalf("notice tries %d, sent %d, debit calls %d; want the same key tried twice, sent once, no debit yet",
					a.tries("CHG-NN:advance-notice"), len(a.notices()), f.ledger.callsFor(c.ID))
			}
		})
	}
}

// A crash after the notice was recorded: the next process resumes the
// charge at its time, sends no second notice, and debits once — also
// when that debit's first answer is lost and it is reclaimed.
func TestACrashAfterTheNoticeSendsNoSecondNoticeAndDebitsOnce(t *testing.T) {
	f, a := noticeFirst(t, nil)
	c := smsFee("CHG-NC")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Waiting)

	// The process dies; another starts with the same store.
	restarted, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, NoticeLead: lead, AdvanceNotifier: a})
	if err != nil {
		t.Fatal(err)
	}
	f.ledger.fail = func(_ charge.DebitRequest, call int) error {
		if call == 1 {
			return errors.New("core banking: connection reset") // may have posted
		}
		return nil
	}
	f.clock.Advance(lead)
	wantOutcome(t, restarted.Process(t.Context(), c, nil), charge.RetryLater)
	f.clock.Advance(lease)
	res := restarted.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	if res.Attempt != 3 || f.ledger.posted(c.ID) != 1 || f.ledger.total() != 1 || a.tries("CHG-NC:advance-notice") != 1 || f.notes.count() != 0 {
		t.Fatalf("attempt %d, entries %d, notice tries %d, notifications %d; want attempt 3, one debit, one notice, none after",
			res.Attempt, f.ledger.total(), a.tries("CHG-NC:advance-notice"), f.notes.count())
	}
	if r := f.record(t, c.ID); r.State != driver.StateDone || len(r.History) != 2 {
		t.Fatalf("record %+v", r)
	}
}

// A crash between sending the notice and recording it (the store did not
// take the WAITING record): the charge is claimed again after the lease,
// the same notice sent again under the same key (the channel drops the
// repeat; one that holds the key with its body would refuse another
// body), and the debit still waits the lead from it.
func TestACrashBetweenTheNoticeAndItsRecordResendsUnderTheSameKey(t *testing.T) {
	f, a := noticeFirst(t, nil)
	c := smsFee("CHG-NR")
	f.store.failFinishes = 100
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.RetryLater)
	if r := f.record(t, c.ID); r.State != driver.StateInProgress || len(a.notices()) != 1 {
		t.Fatalf("record %+v, notices %d", r, len(a.notices()))
	}
	f.store.failFinishes = 0
	f.clock.Advance(lease)
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Waiting)
	got := a.notices()
	if len(got) != 2 || got[0] != got[1] || a.tries("CHG-NR:advance-notice") != 2 {
		t.Fatalf("notices %+v; want the same notice twice", got)
	}
	if !got[1].DebitOnOrAfter.Equal(storetest.Epoch.Add(lead)) || !res.NotBefore.Equal(storetest.Epoch.Add(lease+lead)) {
		t.Fatalf("waiting until %v, the notice says %v; want the first notice's time, and the lead from the re-send", res.NotBefore, got[1].DebitOnOrAfter)
	}
	f.clock.Advance(lead)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if f.ledger.total() != 1 || len(a.notices()) != 2 {
		t.Fatalf("entries %d notices %d", f.ledger.total(), len(a.notices()))
	}
}

// A notice that could not be sent for longer than its lead (the channel
// down for a day) gives the lead from when it is sent at last, never a
// time already past; one sent again within the lead gives the first
// send's time, and the debit still waits the lead from the send.
func TestANoticeSentLateGivesATimeAhead(t *testing.T) {
	f, a := noticeFirst(t, nil)
	a.err = errors.New("sms gateway: 503")
	c := smsFee("CHG-NL")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.RetryLater)
	f.clock.Advance(lead / 2)
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.RetryLater)
	f.clock.Advance(lead)
	a.mu.Lock()
	a.err = nil
	a.mu.Unlock()
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Waiting)
	got := a.notices()
	want := storetest.Epoch.Add(lead/2 + 2*lead)
	if len(got) != 1 || !got[0].DebitOnOrAfter.Equal(want) || !res.NotBefore.Equal(want) {
		t.Fatalf("notices %+v, waiting until %v; want one notice and the wait both at %v", got, res.NotBefore, want)
	}
}

// Notice-first with a retry schedule: the one notice covers the retries;
// a decline after it follows the schedule.
func TestOneNoticeCoversTheRetries(t *testing.T) {
	f, a := noticeFirst(t, &charge.RetryPolicy{Rules: []charge.RetryRule{insufficient}, Jitter: charge.NoJitter})
	f.declineKeys(map[string]string{"CHG-NRT": "INSUFFICIENT_FUNDS"})
	c := smsFee("CHG-NRT")
	res := deliverUntilFinal(t, f, c)
	wantOutcome(t, res, charge.Processed)
	r := f.record(t, c.ID)
	want := []string{
		"notice CHG-NRT:advance-notice sent at " + at(0) + "; debit on or after " + at(lead),
		"generation 1: declined INSUFFICIENT_FUNDS at " + at(lead) + "; retry 1 of 3 at " + at(lead+day),
		"generation 2: debited TXN-CHG-NRT~2 at " + at(lead+day),
	}
	if r.State != driver.StateDone || r.Generation != 2 || !slices.Equal(r.History, want) {
		t.Fatalf("record %+v\nhistory %q\nwant %q", r, r.History, want)
	}
	if len(a.notices()) != 1 || f.ledger.total() != 1 || f.notes.count() != 0 {
		t.Fatalf("notices %d, entries %d, notifications %d; want 1, 1, 0", len(a.notices()), f.ledger.total(), f.notes.count())
	}
}

// A hard decline after the notice is final, with its line.
func TestAHardDeclineAfterTheNoticeIsFinal(t *testing.T) {
	f, _ := noticeFirst(t, nil)
	f.declineKeys(map[string]string{"CHG-NH": "ACCOUNT_CLOSED"})
	c := smsFee("CHG-NH")
	wantOutcome(t, deliverUntilFinal(t, f, c), charge.DebitFailed)
	r := f.record(t, c.ID)
	if r.Detail != "debit declined: ACCOUNT_CLOSED: declined by core banking" || len(r.History) != 2 ||
		r.History[1] != "generation 1: declined ACCOUNT_CLOSED at "+at(lead)+"; final: a hard decline (the account is closed)" {
		t.Fatalf("record %+v\nhistory %q", r, r.History)
	}
}

func TestNoticeLeadNeedsAnAdvanceNotifier(t *testing.T) {
	f := newFixture(t)
	if _, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, NoticeLead: lead}); err == nil {
		t.Fatal("a NoticeLead without an AdvanceNotifier was accepted")
	}
	if _, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, NoticeLead: -time.Hour, AdvanceNotifier: &advance{}}); err == nil {
		t.Fatal("a negative NoticeLead was accepted")
	}
	both := struct {
		*notifier
		*advance
	}{f.notes, &advance{}}
	if _, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: both, NoticeLead: lead}); err != nil {
		t.Fatalf("a Notifier that is an AdvanceNotifier too: %v", err)
	}
}

func TestMoneyForACustomer(t *testing.T) {
	for m, want := range map[charge.Money]string{
		{Minor: 2500, Currency: "INR"}: "₹25.00", {Minor: 5, Currency: "USD"}: "$0.05", {Minor: 125000, Currency: "EUR"}: "€1250.00",
		{Minor: 500, Currency: "JPY"}: "¥500", {Minor: 1234, Currency: "KWD"}: "KWD 1.234", {Minor: -150, Currency: "GBP"}: "-£1.50",
	} {
		if got := m.Human(); got != want {
			t.Errorf("%v.Human() = %q, want %q", m, got, want)
		}
	}
}
