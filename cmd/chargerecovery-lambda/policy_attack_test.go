package main

import (
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The Lambda reads the recovery policy's settings (they are
// pipeline.Config's: IC_NOTICE_LEAD, IC_RETRY_DECLINES…), checks them and
// starts — and then builds its charge service without them. With
// IC_NOTICE_LEAD=24h the charge is debited on its first delivery, with no
// advance notice before it: the debit the mode exists to forbid.
func TestLambdaNoticeLeadSendsTheNoticeAndDoesNotDebit(t *testing.T) {
	f := newFn(t, corebanksim.Faults{}, "IC_NOTICE_LEAD=24h")
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-NOTICE", "001234567890"))
	f.invoke(ev, ids, time.Minute)
	if n := len(f.ledger.PostingsByKey()); n != 0 {
		t.Errorf("debited on the first delivery (%d postings) with IC_NOTICE_LEAD=24h: no advance notice, no lead", n)
	}
	if r, err := f.guard.Get(t.Context(), "CHG-L-NOTICE"); err != nil || r.State != driver.StateWaiting || r.Status != string(charge.NoticeSent) {
		t.Errorf("record %+v %v, want WAITING NOTICE_SENT", r, err)
	}
}

// IC_RETRY_DECLINES likewise: a decline the schedule retries is
// dead-lettered FAILED as without one.
func TestLambdaRetryDeclinesSchedulesTheRetry(t *testing.T) {
	f := newFn(t, corebanksim.Faults{DeclineAccounts: map[string]string{declinedAccount: "INSUFFICIENT_FUNDS"}},
		"IC_RETRY_DECLINES=INSUFFICIENT_FUNDS=24h×3")
	f.start()
	ev, ids := f.send(chargeBody("CHG-L-RETRY", declinedAccount))
	f.invoke(ev, ids, time.Minute)
	if r, err := f.guard.Get(t.Context(), "CHG-L-RETRY"); err != nil || r.State != driver.StateWaiting || r.Generation != 2 {
		t.Errorf("record %+v %v, want WAITING under generation 2 (the retry scheduled)", r, err)
	}
	want(t, "DLQ", f.dlq(), nil)
}

// IC_POSTING_WINDOWS likewise: the Lambda has no gate, so a charge that
// arrives while the bank's window is closed is posted at once. It must
// either keep the window or refuse to start.
func TestLambdaPostingWindowsIsKeptOrRefused(t *testing.T) {
	closed := time.Now().UTC().AddDate(0, 0, 3).Weekday().String()[:3] + " 00:00-00:01 UTC" // a minute of a day that is not today
	f := newFn(t, corebanksim.Faults{}, "IC_POSTING_WINDOWS="+closed)
	env := map[string]string{}
	for _, e := range f.env {
		if k, v, ok := strings.Cut(e, "="); ok {
			env[k] = v
		}
	}
	var stderr strings.Builder
	h, err := setup(t.Context(), func(k string) string { return env[k] }, &stderr)
	if err != nil {
		if !strings.Contains(err.Error(), "IC_POSTING_WINDOWS") && !strings.Contains(err.Error(), "posting-windows") {
			t.Fatalf("refused, without naming the setting: %v", err)
		}
		return
	}
	ev, _ := f.send(chargeBody("CHG-L-WINDOW", "001234567890"))
	if _, err := h(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	if n := len(f.ledger.PostingsByKey()); n != 0 {
		t.Errorf("posted %d debit(s) outside the posting window %q", n, closed)
	}
}
