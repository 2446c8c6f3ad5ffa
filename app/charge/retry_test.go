package charge_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

func TestParseRetryRules(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []charge.RetryRule
	}{
		{"INSUFFICIENT_FUNDS=24h×3,ACCOUNT_FROZEN=72h×1", []charge.RetryRule{{"INSUFFICIENT_FUNDS", 24 * time.Hour, 3}, {"ACCOUNT_FROZEN", 72 * time.Hour, 1}}},
		{"INSUFFICIENT_FUNDS=1dx2", []charge.RetryRule{{"INSUFFICIENT_FUNDS", 24 * time.Hour, 2}}},
		{" INSUFFICIENT_FUNDS = 1d12h × 2 , LIMIT_EXCEEDED=90mx1", []charge.RetryRule{{"INSUFFICIENT_FUNDS", 36 * time.Hour, 2}, {"LIMIT_EXCEEDED", 90 * time.Minute, 1}}},
		{"E2=3d×10", []charge.RetryRule{{"E2", 72 * time.Hour, 10}}},
		{"", nil},
		{"  ", nil},
	} {
		got, err := charge.ParseRetryRules(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRetryRules(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// Each refusal names the part at fault and what was wanted, in words an
// operator can act on.
func TestParseRetryRulesRefusals(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"INSUFFICIENT_FUNDS=24h×3,", `retry schedule: entry 2 is empty: want CODE=DELAY×N (e.g. INSUFFICIENT_FUNDS=24h×3), comma-separated`},
		{"INSUFFICIENT_FUNDS", `retry schedule entry "INSUFFICIENT_FUNDS": want CODE=DELAY×N (e.g. INSUFFICIENT_FUNDS=24h×3)`},
		{"=24h×3", `retry schedule entry "=24h×3": want CODE=DELAY×N (e.g. INSUFFICIENT_FUNDS=24h×3)`},
		{"INSUFFICIENT_FUNDS=24h", `retry schedule entry "INSUFFICIENT_FUNDS=24h": no ×N after the delay "24h": want CODE=DELAY×N (e.g. INSUFFICIENT_FUNDS=24h×3)`},
		{"INSUFFICIENT_FUNDS=24y×3", `retry schedule entry "INSUFFICIENT_FUNDS=24y×3": delay "24y": want a Go duration (90m, 24h) or days (3d, 1d12h)`},
		{"INSUFFICIENT_FUNDS=1.5d×3", `retry schedule entry "INSUFFICIENT_FUNDS=1.5d×3": delay "1.5d": want a Go duration (90m, 24h) or days (3d, 1d12h)`},
		{"INSUFFICIENT_FUNDS=-1h×3", `retry schedule entry "INSUFFICIENT_FUNDS=-1h×3": delay "-1h": want a Go duration (90m, 24h) or days (3d, 1d12h)`},
		{"INSUFFICIENT_FUNDS=0s×3", `retry schedule entry "INSUFFICIENT_FUNDS=0s×3": delay "0s" must be more than zero`},
		{"INSUFFICIENT_FUNDS=24h×0", `retry schedule entry "INSUFFICIENT_FUNDS=24h×0": count "0" must be a whole number of retries, 1 or more`},
		{"INSUFFICIENT_FUNDS=24h×three", `retry schedule entry "INSUFFICIENT_FUNDS=24h×three": count "three" must be a whole number of retries, 1 or more`},
		{"insufficient_funds=24h×3", `retry schedule entry "insufficient_funds=24h×3": code "insufficient_funds" must be upper-case letters, digits and _ (the bank's decline code)`},
		{"ACCOUNT_CLOSED=72h×1", `retry schedule entry "ACCOUNT_CLOSED=72h×1": ACCOUNT_CLOSED is a hard decline (the account is closed): it is never retried`},
		{"INSUFFICIENT_FUNDS=24h×3,INVALID_ACCOUNT=1h×1", `retry schedule entry "INVALID_ACCOUNT=1h×1": INVALID_ACCOUNT is a hard decline (the account number is invalid): it is never retried`},
		{"INSUFFICIENT_FUNDS=24h×3,INSUFFICIENT_FUNDS=48h×1", `retry schedule entry "INSUFFICIENT_FUNDS=48h×1": code INSUFFICIENT_FUNDS is listed twice`},
	} {
		got, err := charge.ParseRetryRules(tt.in)
		if err == nil || err.Error() != tt.want || !errors.Is(err, charge.ErrRetrySchedule) || got != nil {
			t.Errorf("ParseRetryRules(%q) = %v, %v\nwant the error %s", tt.in, got, err, tt.want)
		}
	}
}

func TestARuleIsWrittenAsItIsRead(t *testing.T) {
	for _, in := range []string{"INSUFFICIENT_FUNDS=1d×3", "ACCOUNT_FROZEN=3d×1", "LIMIT_EXCEEDED=1h30m×2", "X=36h×1", "Y=1m30s×1", "Z=1.5s×1"} {
		rules, err := charge.ParseRetryRules(in)
		if err != nil || len(rules) != 1 || rules[0].String() != in {
			t.Errorf("%s: read %v (%v), written %q", in, rules, err, rules)
		}
	}
}

// A policy built in code is checked as the flag is: a hard decline, a
// repeat, a delay past the window and bad caps are refused by NewService.
func TestNewServiceRefusesABadPolicy(t *testing.T) {
	f := newFixture(t)
	ok := []charge.RetryRule{{"INSUFFICIENT_FUNDS", 24 * time.Hour, 3}}
	for _, tt := range []struct {
		p    charge.RetryPolicy
		want string
	}{
		{charge.RetryPolicy{}, "retry schedule: no rules"},
		{charge.RetryPolicy{Rules: []charge.RetryRule{{"ACCOUNT_CLOSED", time.Hour, 1}}}, `retry schedule entry "ACCOUNT_CLOSED=1h×1": ACCOUNT_CLOSED is a hard decline (the account is closed): it is never retried`},
		{charge.RetryPolicy{Rules: append(ok, ok[0])}, "code INSUFFICIENT_FUNDS is listed twice"},
		{charge.RetryPolicy{Rules: []charge.RetryRule{{"INSUFFICIENT_FUNDS", 0, 3}}}, "delay 0s must be more than zero"},
		{charge.RetryPolicy{Rules: []charge.RetryRule{{"INSUFFICIENT_FUNDS", time.Hour, 0}}}, "count 0 must be a whole number of retries"},
		{charge.RetryPolicy{Rules: []charge.RetryRule{{"INSUFFICIENT_FUNDS", 31 * 24 * time.Hour, 1}}}, `retry schedule entry "INSUFFICIENT_FUNDS=31d×1": delay 31d is longer than the 30d window from the first attempt: no retry could be scheduled`},
		{charge.RetryPolicy{Rules: ok, MaxAttempts: 1}, "at most 1 debit attempts per charge: want 2 or more"},
		{charge.RetryPolicy{Rules: ok, Window: -time.Hour}, "window -1h0m0s must not be negative"},
		{charge.RetryPolicy{Rules: ok, Jitter: 1.5}, "jitter 1.5 must be a fraction from 0 to 1"},
	} {
		_, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, Retry: &tt.p})
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, charge.ErrRetrySchedule) {
			t.Errorf("policy %+v: %v, want an error with %q", tt.p, err, tt.want)
		}
	}
}

func TestHardDeclinesAreDocumentedAndNeverListed(t *testing.T) {
	codes := charge.HardDeclineCodes()
	for _, want := range []string{"ACCOUNT_CLOSED", "INVALID_ACCOUNT", "ACCOUNT_NOT_FOUND", "MANDATE_CANCELLED", "STOP_PAYMENT"} {
		if why, ok := charge.HardDecline(want); !ok || why == "" {
			t.Errorf("%s is not a hard decline with its reason", want)
		}
	}
	for _, c := range codes {
		if _, err := charge.ParseRetryRules(c + "=24h×1"); err == nil || !strings.Contains(err.Error(), "hard decline") {
			t.Errorf("a schedule listing %s: %v, want refused", c, err)
		}
	}
	if _, ok := charge.HardDecline("INSUFFICIENT_FUNDS"); ok {
		t.Error("INSUFFICIENT_FUNDS is a soft decline: the funds may come")
	}
}

func TestHistoryLinesAreReadAsTheyAreWritten(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		line string
		want charge.HistoryLine
	}{
		{"generation 1: declined INSUFFICIENT_FUNDS at 2026-12-01T10:00:00Z; retry 1 of 3 at 2026-12-02T10:00:00Z",
			charge.HistoryLine{Kind: charge.HistoryDeclined, Generation: 1, Code: "INSUFFICIENT_FUNDS", At: at, Retry: 1, Retries: 3, Next: at.Add(24 * time.Hour)}},
		{"generation 4: declined INSUFFICIENT_FUNDS at 2026-12-01T10:00:00Z; retries exhausted: 4 of 4 debit attempts made",
			charge.HistoryLine{Kind: charge.HistoryDeclined, Generation: 4, Code: "INSUFFICIENT_FUNDS", At: at, Outcome: "retries exhausted: 4 of 4 debit attempts made"}},
		{"generation 2: declined ACCOUNT_CLOSED at 2026-12-01T10:00:00Z; final: a hard decline (the account is closed)",
			charge.HistoryLine{Kind: charge.HistoryDeclined, Generation: 2, Code: "ACCOUNT_CLOSED", At: at, Outcome: "final: a hard decline (the account is closed)"}},
		{"generation 3: debited CBS0000000042 at 2026-12-01T10:00:00Z",
			charge.HistoryLine{Kind: charge.HistoryDebited, Generation: 3, Reference: "CBS0000000042", At: at}},
		{"notice CHG/2026/11/7:advance-notice sent at 2026-12-01T10:00:00Z; debit on or after 2026-12-02T10:00:00Z",
			charge.HistoryLine{Kind: charge.HistoryNotice, NoticeKey: "CHG/2026/11/7:advance-notice", At: at, Next: at.Add(24 * time.Hour)}},
	} {
		got, ok := charge.ParseHistoryLine(tt.line)
		if !ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHistoryLine(%q) = %+v, %v\nwant %+v", tt.line, got, ok, tt.want)
		}
		if s := tt.want.String(); s != tt.line {
			t.Errorf("String() = %q, want %q", s, tt.line)
		}
	}
	// The operator's reopening (Guard.Reopen's line): its generation, and
	// whether it had failed by a decline.
	for line, declined := range map[string]bool{
		"generation 1: FAILED debit declined: ACCOUNT_FROZEN (attempt 1); reopened 2026-12-05T11:00:00Z by asha: unfrozen; new generation 2":                         true,
		"generation 2: FAILED retries_exhausted: debit declined: INSUFFICIENT_FUNDS (attempt 2); reopened 2026-12-05T11:00:00Z by asha: salary in; new generation 3": true,
		"generation 1: FAILED corebank: missing key (attempt 1); reopened 2026-12-05T11:00:00Z by asha: fixed":                                                       false,
	} {
		got, ok := charge.ParseHistoryLine(line)
		if !ok || got.Kind != charge.HistoryReopened || got.Declined != declined {
			t.Errorf("ParseHistoryLine(%q) = %+v, %v; want a reopening, declined=%v", line, got, ok, declined)
		}
	}
	for _, other := range []string{"", "generation x: declined A at 2026-12-01T10:00:00Z; retry 1 of 1 at 2026-12-01T10:00:00Z",
		"generation 1: declined A at yesterday; retry 1 of 1 at 2026-12-01T10:00:00Z", "generation 1: declined A at 2026-12-01T10:00:00Z; retry 2 of 1 at 2026-12-01T10:00:00Z",
		"generation 1: declined A at 2026-12-01T10:00:00Z; something else", "notice K sent at 2026-12-01T10:00:00Z", "generation 01: debited R at 2026-12-01T10:00:00Z"} {
		if l, ok := charge.ParseHistoryLine(other); ok {
			t.Errorf("ParseHistoryLine(%q) = %+v, want not one of ours", other, l)
		}
	}
}

// Whether a retry happens is the schedule's to say, not the jitter's: a
// rule whose delay is the whole window (INSUFFICIENT_FUNDS=30d×1 with the
// default 30-day window) is either refused or retries once, whatever the
// random draw — not accepted and then, for all but a draw of exactly 0,
// ended retries_exhausted after the first attempt.
func TestTheJitterDoesNotDecideWhetherARetryHappens(t *testing.T) {
	rule := charge.RetryRule{Code: "INSUFFICIENT_FUNDS", Delay: 30 * day, Retries: 1}
	if err := (&charge.RetryPolicy{Rules: []charge.RetryRule{rule}}).Validate(); err != nil {
		if !errors.Is(err, charge.ErrRetrySchedule) {
			t.Fatalf("refused with %v, want a RetryScheduleError", err)
		}
		return // refused: the operator is told
	}
	for _, draw := range []float64{0, 0.5, 0.99} {
		f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{rule}, Rand: func() float64 { return draw }})
		f.ledger.fail = func(charge.DebitRequest, int) error { return &charge.DeclineError{Code: "INSUFFICIENT_FUNDS"} }
		c := smsFee("CHG-JW")
		wantOutcome(t, deliverUntilFinal(t, f, c), charge.DebitFailed)
		if r := f.record(t, c.ID); r.State != driver.StateFailed || totalCalls(f) != 2 {
			t.Errorf("draw %v: accepted, and %d debit attempt(s), want 2\nhistory %q", draw, totalCalls(f), r.History)
		}
	}
}

// The history the policy writes must fit a record in every store
// (driver.MaxDetailBytes: "a record stays far below every store's item
// limit (DynamoDB's 400 KB), so that it can always be finished"). A cap
// of attempts is a flag (--retry-max-attempts) without a bound: at a few
// thousand attempts the WAITING write carries a history DynamoDB refuses,
// and the charge can never be finished (claimed again, declined again,
// refused again, for as long as the message lives).
func TestTheHistoryOfEveryAttemptTheCapAllowsFitsARecord(t *testing.T) {
	const itemLimit = 400_000
	p := charge.RetryPolicy{MaxAttempts: 4000, Jitter: charge.NoJitter,
		Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: time.Minute, Retries: 4000}}}
	if err := p.Validate(); err != nil {
		if !errors.Is(err, charge.ErrRetrySchedule) {
			t.Fatalf("refused with %v, want a RetryScheduleError", err)
		}
		return // refused: the operator is told
	}
	f := withPolicy(t, p)
	f.ledger.fail = func(charge.DebitRequest, int) error { return &charge.DeclineError{Code: "INSUFFICIENT_FUNDS"} }
	c := smsFee("CHG-BIG")
	var res charge.Result
	for range p.MaxAttempts + 1 {
		if res = f.svc.Process(t.Context(), c, nil); res.Outcome != charge.Waiting {
			break
		}
		f.clock.Advance(res.NotBefore.Sub(f.clock.Now()))
	}
	wantOutcome(t, res, charge.DebitFailed)
	r := f.record(t, c.ID)
	size := len(r.Detail) + len(r.Status)
	for _, l := range r.History {
		size += len(l)
	}
	if size > itemLimit-2*driver.MaxDetailBytes {
		t.Fatalf("accepted, and after %d attempts the record holds %d bytes of history and result: past DynamoDB's item limit (400 KB)", r.Generation, size)
	}
}

// Attack 3f: HardDecline "normalises case and spaces", but only trims the
// ends: a bank that spells the code with a space or a hyphen between its
// words ("Account Closed", "account-closed") is a soft decline, and
// EligibleForNewGeneration lets an operator present the charge again
// under a new key (a re-presentment after a hard decline: scheme fines,
// a closed account debited).
func TestAttack3HardDeclineSpellings(t *testing.T) {
	for _, code := range []string{"account_closed", " Stop_Payment ", "Account Closed", "ACCOUNT-CLOSED", "stop payment", "Mandate  Cancelled"} {
		t.Run(code, func(t *testing.T) {
			rec := driver.Record{Key: "CHG-1", State: driver.StateFailed, Detail: (&charge.DeclineError{Code: code}).Error()}
			if err := charge.EligibleForNewGeneration(rec); !errors.Is(err, charge.ErrHardDecline) {
				t.Fatalf("declined %q: EligibleForNewGeneration %v; want ErrHardDecline", code, err)
			}
		})
	}
}

// Attack (issue 50): a hard decline is never re-presented under a new key.
// The code is the bank's text, kept as sent (corebank's classify only
// masks and clips it): a bank that spells it in lower or mixed case, or
// with a space for the underscore inside, is not a hard decline here, and
// reopen --new-attempt re-presents a debit to a closed account / a
// cancelled mandate.
func TestAttack50HardDeclineSpellingsAreReopenable(t *testing.T) {
	for _, detail := range []string{
		"debit declined: ACCOUNT_CLOSED",              // control: refused
		"debit declined: account_closed",              // lower case
		"debit declined: Mandate_Cancelled: by payer", // mixed case
		"retries_exhausted: debit declined: stop_payment",
	} {
		t.Run(detail, func(t *testing.T) {
			r := driver.Record{Key: "CHG-1", State: driver.StateFailed, Detail: detail}
			if err := charge.EligibleForNewGeneration(r); err == nil {
				t.Fatalf("EligibleForNewGeneration(%q) = nil (code %q): a hard decline would be presented again under a new key", detail, charge.DeclineCode(detail))
			}
		})
	}
}

// withPolicy is a fixture whose service retries declines by p.
func withPolicy(t *testing.T, p charge.RetryPolicy) *fixture {
	t.Helper()
	f := newFixture(t)
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, FinishTimeout: time.Second, Retry: &p})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	return f
}

// declineKeys makes the bank decline each bank key with its code (in
// the order of its calls, the last repeated) and post every other key.
func (f *fixture) declineKeys(codes map[string]string) {
	f.ledger.fail = func(req charge.DebitRequest, _ int) error {
		if code, ok := codes[req.IdempotencyKey]; ok {
			return &charge.DeclineError{Code: code, Message: "declined by core banking"}
		}
		return nil
	}
}

// at is the fake clock's start plus d, as a history line writes it.
func at(d time.Duration) string { return storetest.Epoch.Add(d).UTC().Format(time.RFC3339) }

const day = 24 * time.Hour

var insufficient = charge.RetryRule{Code: "INSUFFICIENT_FUNDS", Delay: day, Retries: 3}

// The scenario: declined INSUFFICIENT_FUNDS twice, then funded —
// one debit, under generation 3 (bank key CHG-R~3), DONE, with the three
// attempts in the history; nothing posted or asked before each time.
func TestDeclinedTwiceThenFundedIsDebitedOnceUnderGeneration3(t *testing.T) {
	f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{insufficient}, Jitter: charge.NoJitter})
	f.declineKeys(map[string]string{"CHG-R": "INSUFFICIENT_FUNDS", "CHG-R~2": "INSUFFICIENT_FUNDS"})
	c := smsFee("CHG-R")
	ctx := t.Context()

	res := f.svc.Process(ctx, c, nil)
	wantOutcome(t, res, charge.Waiting)
	if res.Status != charge.RetryScheduled || !res.NotBefore.Equal(storetest.Epoch.Add(day)) || res.RetryAfter != day ||
		res.Reason != "next attempt at "+at(day)+" (attempt 2 of 4, after INSUFFICIENT_FUNDS)" {
		t.Fatalf("first decline: %+v; want waiting a day for attempt 2 of 4", res)
	}
	if r := f.record(t, c.ID); r.State != driver.StateWaiting || r.Generation != 2 || r.Status != "RETRY_SCHEDULED" {
		t.Fatalf("record %+v, want WAITING under generation 2", r)
	}

	// Redeliveries before the time find it waiting: no call to the bank.
	for _, d := range []time.Duration{time.Minute, 12 * time.Hour, day - time.Millisecond} {
		f.clock.Advance(d - (f.clock.Now().Sub(storetest.Epoch)))
		res := f.svc.Process(ctx, c, nil)
		wantOutcome(t, res, charge.Waiting)
		if res.Status != charge.RetryScheduled || !res.NotBefore.Equal(storetest.Epoch.Add(day)) {
			t.Fatalf("a delivery %v in: %+v, want the same wait", d, res)
		}
	}
	if f.ledger.callsFor("CHG-R") != 1 || f.ledger.callsFor("CHG-R~2") != 0 {
		t.Fatalf("bank calls %v during the wait, want the first only", f.ledger.calls)
	}

	f.clock.Advance(time.Millisecond) // the retry's time
	res = f.svc.Process(ctx, c, nil)
	wantOutcome(t, res, charge.Waiting)
	if res.Reason != "next attempt at "+at(2*day)+" (attempt 3 of 4, after INSUFFICIENT_FUNDS)" || res.Attempt != 2 {
		t.Fatalf("second decline: %+v", res)
	}
	f.clock.Advance(day)
	res = f.svc.Process(ctx, c, nil)
	wantOutcome(t, res, charge.Processed)
	if res.Status != charge.Debited || res.Reference != "TXN-CHG-R~3" || res.Attempt != 3 {
		t.Fatalf("third attempt: %+v, want DEBITED under CHG-R~3", res)
	}

	r := f.record(t, c.ID)
	want := []string{
		"generation 1: declined INSUFFICIENT_FUNDS at " + at(0) + "; retry 1 of 3 at " + at(day),
		"generation 2: declined INSUFFICIENT_FUNDS at " + at(day) + "; retry 2 of 3 at " + at(2*day),
		"generation 3: debited TXN-CHG-R~3 at " + at(2*day),
	}
	if r.State != driver.StateDone || r.Generation != 3 || r.Detail != "TXN-CHG-R~3" || !slices.Equal(r.History, want) {
		t.Fatalf("record %+v\nhistory %q\nwant DONE, generation 3, history %q", r, r.History, want)
	}
	if f.ledger.total() != 1 || f.ledger.posted("CHG-R~3") != 1 || f.notes.count() != 1 {
		t.Fatalf("ledger entries %d (CHG-R~3: %d), notifications %d; want one debit under generation 3 and its notice",
			f.ledger.total(), f.ledger.posted("CHG-R~3"), f.notes.count())
	}
	if got := f.ledger.entries["CHG-R~3"]; got != c.DebitRequestFor(3) {
		t.Fatalf("posted %+v, want DebitRequestFor(3)", got)
	}
	f.clock.Advance(day)
	wantOutcome(t, f.svc.Process(ctx, c, nil), charge.DuplicateDone)
	if f.ledger.total() != 1 {
		t.Fatal("a redelivery after DONE posted again")
	}
}

// Every decline the schedule does not retry is final as without one: a
// hard decline (even one the bank sends after a retried one), a code not
// listed. A first attempt's final decline is recorded as today (no
// history); one after retries adds its line.
func TestDeclinesTheScheduleDoesNotRetryAreFinal(t *testing.T) {
	frozen := charge.RetryRule{Code: "ACCOUNT_FROZEN", Delay: 3 * day, Retries: 1}
	for _, tt := range []struct {
		name    string
		codes   map[string]string // bank key → decline
		calls   int               // debit attempts before FAILED
		detail  string
		history []string
	}{
		{"a hard decline", map[string]string{"CHG-F": "ACCOUNT_CLOSED"}, 1, "debit declined: ACCOUNT_CLOSED: declined by core banking", nil},
		{"a code not listed", map[string]string{"CHG-F": "DO_NOT_HONOUR"}, 1, "debit declined: DO_NOT_HONOUR: declined by core banking", nil},
		{"a hard decline after a retried one", map[string]string{"CHG-F": "INSUFFICIENT_FUNDS", "CHG-F~2": "ACCOUNT_CLOSED"}, 2,
			"debit declined: ACCOUNT_CLOSED: declined by core banking", []string{
				"generation 1: declined INSUFFICIENT_FUNDS at " + at(0) + "; retry 1 of 3 at " + at(day),
				"generation 2: declined ACCOUNT_CLOSED at " + at(day) + "; final: a hard decline (the account is closed)"}},
		{"a code not listed after a retried one", map[string]string{"CHG-F": "ACCOUNT_FROZEN", "CHG-F~2": "DO_NOT_HONOUR"}, 2,
			"debit declined: DO_NOT_HONOUR: declined by core banking", []string{
				"generation 1: declined ACCOUNT_FROZEN at " + at(0) + "; retry 1 of 1 at " + at(3*day),
				"generation 2: declined DO_NOT_HONOUR at " + at(3*day) + "; final: not in the retry schedule"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{insufficient, frozen}, Jitter: charge.NoJitter})
			f.declineKeys(tt.codes)
			c := smsFee("CHG-F")
			res := deliverUntilFinal(t, f, c)
			wantOutcome(t, res, charge.DebitFailed)
			r := f.record(t, c.ID)
			if r.State != driver.StateFailed || r.Detail != tt.detail || res.Reason != tt.detail || !slices.Equal(r.History, tt.history) {
				t.Fatalf("record %+v\nhistory %q\nwant FAILED %q with %q", r, r.History, tt.detail, tt.history)
			}
			if calls := totalCalls(f); calls != tt.calls || f.ledger.total() != 0 {
				t.Fatalf("debit calls %d, entries %d; want %d and none", calls, f.ledger.total(), tt.calls)
			}
			f.clock.Advance(2 * day)
			wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DuplicateFailed)
			if totalCalls(f) != tt.calls {
				t.Fatal("a FAILED charge was debited again")
			}
		})
	}
}

// deliverUntilFinal delivers c at each of its waits' times until it is
// not waiting, and returns the last result.
func deliverUntilFinal(t *testing.T, f *fixture, c charge.Charge) charge.Result {
	t.Helper()
	for range 20 {
		res := f.svc.Process(t.Context(), c, nil)
		if res.Outcome != charge.Waiting {
			return res
		}
		if !res.NotBefore.After(f.clock.Now()) {
			t.Fatalf("waiting until %v at %v", res.NotBefore, f.clock.Now())
		}
		f.clock.Advance(res.NotBefore.Sub(f.clock.Now()))
	}
	t.Fatal("still waiting after 20 deliveries")
	return charge.Result{}
}

func totalCalls(f *fixture) int {
	f.ledger.mu.Lock()
	defer f.ledger.mu.Unlock()
	n := 0
	for _, c := range f.ledger.calls {
		n += c
	}
	return n
}

// The schedule runs out three ways — the code's retries, the attempts per
// charge, the window from the first attempt — and each ends FAILED
// retries_exhausted with the last decline, its reason in the history.
func TestTheScheduleRunningOutEndsFailedRetriesExhausted(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy charge.RetryPolicy
		codes  []string // the bank's answer to generations 1, 2, …
		last   string   // the last history line
	}{
		{"the code's retries", charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: day, Retries: 2}}},
			[]string{"INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS"},
			"generation 3: declined INSUFFICIENT_FUNDS at " + at(2*day) + "; retries exhausted: 2 of 2 retries after INSUFFICIENT_FUNDS made"},
		{"the attempts per charge, across codes", charge.RetryPolicy{MaxAttempts: 3, Rules: []charge.RetryRule{
			{Code: "INSUFFICIENT_FUNDS", Delay: day, Retries: 5}, {Code: "ACCOUNT_FROZEN", Delay: day, Retries: 5}}},
			[]string{"INSUFFICIENT_FUNDS", "ACCOUNT_FROZEN", "INSUFFICIENT_FUNDS"},
			"generation 3: declined INSUFFICIENT_FUNDS at " + at(2*day) + "; retries exhausted: 3 of 3 debit attempts made"},
		{"the default of 4 attempts", charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: day, Retries: 9}}},
			[]string{"INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS"},
			"generation 4: declined INSUFFICIENT_FUNDS at " + at(3*day) + "; retries exhausted: 4 of 4 debit attempts made"},
		{"the window", charge.RetryPolicy{Window: 25 * day, Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: 10 * day, Retries: 5}}},
			[]string{"INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS"},
			"generation 3: declined INSUFFICIENT_FUNDS at " + at(20*day) + "; retries exhausted: the next attempt at " + at(30*day) +
				" would be past the 25d window that ends at " + at(25*day)},
		{"the default window of 30 days", charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: 20 * day, Retries: 5}}},
			[]string{"INSUFFICIENT_FUNDS", "INSUFFICIENT_FUNDS"},
			"generation 2: declined INSUFFICIENT_FUNDS at " + at(20*day) + "; retries exhausted: the next attempt at " + at(40*day) +
				" would be past the 30d window that ends at " + at(30*day)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.policy.Jitter = charge.NoJitter
			f := withPolicy(t, tt.policy)
			codes := map[string]string{}
			for i, code := range tt.codes {
				codes[charge.BankKey("CHG-X", i+1)] = code
			}
			f.declineKeys(codes)
			c := smsFee("CHG-X")
			res := deliverUntilFinal(t, f, c)
			wantOutcome(t, res, charge.DebitFailed)
			last := tt.codes[len(tt.codes)-1]
			wantDetail := "retries_exhausted: debit declined: " + last + ": declined by core banking"
			r := f.record(t, c.ID)
			if r.State != driver.StateFailed || r.Detail != wantDetail || res.Reason != wantDetail || len(r.History) != len(tt.codes) ||
				r.History[len(r.History)-1] != tt.last || r.Generation != len(tt.codes) {
				t.Fatalf("record %+v\nhistory %q\nwant FAILED %q, the last line %q", r, r.History, wantDetail, tt.last)
			}
			if totalCalls(f) != len(tt.codes) || f.ledger.total() != 0 {
				t.Fatalf("debit calls %d, want %d", totalCalls(f), len(tt.codes))
			}
		})
	}
}

// The delay is measured from the decline and lengthened by the jitter:
// never shortened, never by more than its fraction.
func TestJitterStaysWithinItsBounds(t *testing.T) {
	for _, tt := range []struct {
		name   string
		jitter float64
		r      float64
		want   time.Duration
	}{
		{"none drawn", 0, 0, day},
		{"half of the default 10%", 0, 0.5, day + 72*time.Minute},
		{"nearly all of it, up to the next whole second", 0, 0.9999999, day + 144*time.Minute},
		{"a source above 1 is taken as 1", 0, 7, day + 144*time.Minute},
		{"a source below 0 is taken as 0", 0, -3, day},
		{"25%", 0.25, 0.5, day + 3*time.Hour},
		{"NoJitter", charge.NoJitter, 0.9, day},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{insufficient}, Jitter: tt.jitter, Rand: func() float64 { return tt.r }})
			f.declineKeys(map[string]string{"CHG-J": "INSUFFICIENT_FUNDS"})
			res := f.svc.Process(t.Context(), smsFee("CHG-J"), nil)
			wantOutcome(t, res, charge.Waiting)
			if got := res.NotBefore.Sub(storetest.Epoch); got != tt.want {
				t.Fatalf("the retry is %v after the decline, want %v", got, tt.want)
			}
		})
	}
	// Over many draws of the real source: within [delay, delay × 1.1].
	f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{insufficient}})
	f.ledger.fail = func(charge.DebitRequest, int) error { return &charge.DeclineError{Code: "INSUFFICIENT_FUNDS"} }
	for i := range 200 {
		c := smsFee("CHG-J")
		c.ID = c.ID + "-" + time.Duration(i).String()
		res := f.svc.Process(t.Context(), c, nil)
		if got := res.NotBefore.Sub(f.clock.Now()); res.Outcome != charge.Waiting || got < day || got > day+day/10 {
			t.Fatalf("draw %d: %v after the decline (%v), want within [24h, 26h24m]", i, got, res.Outcome)
		}
	}
}

// A charge whose schedule ran out is a decline for the operator's tools:
// reopen --new-attempt moves it to the next generation (the same key is
// refused, as for any decline: the bank's answer under it is final), and
// its next delivery debits under that key, the history kept and extended.
func TestAnExhaustedChargeIsReopenedIntoANewGeneration(t *testing.T) {
	f := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: day, Retries: 1}}, Jitter: charge.NoJitter})
	f.declineKeys(map[string]string{"CHG-O": "INSUFFICIENT_FUNDS", "CHG-O~2": "INSUFFICIENT_FUNDS"})
	c := smsFee("CHG-O")
	wantOutcome(t, deliverUntilFinal(t, f, c), charge.DebitFailed)
	r := f.record(t, c.ID)
	if !charge.DeclinedDetail(r.Detail) || charge.EligibleForNewGeneration(r) != nil {
		t.Fatalf("record %+v: a schedule that ran out is a decline, eligible for a new attempt", r)
	}

	f.clock.Advance(3 * day)
	reopened, err := f.guard.Reopen(t.Context(), c.ID, "salary credited", idempotency.ReopenOptions{NewGeneration: true,
		Eligible: charge.EligibleForNewGeneration, Operator: "asha"})
	if err != nil || reopened.Generation != 3 || len(reopened.History) != 3 {
		t.Fatalf("reopen: %+v, %v; want generation 3 with three lines", reopened, err)
	}
	res := f.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.Processed)
	r = f.record(t, c.ID)
	if r.State != driver.StateDone || res.Reference != "TXN-CHG-O~3" || len(r.History) != 4 ||
		r.History[3] != "generation 3: debited TXN-CHG-O~3 at "+at(4*day) {
		t.Fatalf("record %+v\nhistory %q; want DONE under CHG-O~3 with its line", r, r.History)
	}

	// Declined once more after the reopening: the schedule has nothing
	// left (its retry and the reopened generation counted), so it is final.
	g := withPolicy(t, charge.RetryPolicy{Rules: []charge.RetryRule{{Code: "INSUFFICIENT_FUNDS", Delay: day, Retries: 1}}, Jitter: charge.NoJitter})
	g.declineKeys(map[string]string{"CHG-O": "INSUFFICIENT_FUNDS", "CHG-O~2": "INSUFFICIENT_FUNDS", "CHG-O~3": "INSUFFICIENT_FUNDS"})
	wantOutcome(t, deliverUntilFinal(t, g, c), charge.DebitFailed)
	if _, err := g.guard.Reopen(t.Context(), c.ID, "try again", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err != nil {
		t.Fatal(err)
	}
	res = g.svc.Process(t.Context(), c, nil)
	wantOutcome(t, res, charge.DebitFailed)
	if r := g.record(t, c.ID); r.Detail != "retries_exhausted: debit declined: INSUFFICIENT_FUNDS: declined by core banking" ||
		r.History[len(r.History)-1] != "generation 3: declined INSUFFICIENT_FUNDS at "+at(day)+"; retries exhausted: 1 of 1 retries after INSUFFICIENT_FUNDS made" {
		t.Fatalf("record %+v\nhistory %q", r, r.History)
	}
}

// Without a policy every decline is final and nothing is added to the
// history: today's records exactly.
func TestWithoutAPolicyADeclineIsFinalAsBefore(t *testing.T) {
	f := newFixture(t)
	f.declineKeys(map[string]string{"CHG-N": "INSUFFICIENT_FUNDS"})
	c := smsFee("CHG-N")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DebitFailed)
	if _, err := f.guard.Reopen(t.Context(), c.ID, "funds", idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err != nil {
		t.Fatal(err)
	}
	f.declineKeys(map[string]string{"CHG-N~2": "INSUFFICIENT_FUNDS"})
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.DebitFailed)
	if r := f.record(t, c.ID); r.Detail != "debit declined: INSUFFICIENT_FUNDS: declined by core banking" || len(r.History) != 1 {
		t.Fatalf("record %+v, want the decline and only the reopening's line", r)
	}
}
