package charge_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
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
