package charge_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

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
