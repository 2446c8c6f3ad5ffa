package notifysim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/notifysim"
)

func TestRecorderRecordsMaskedAndInjectsFailures(t *testing.T) {
	c := charge.Charge{ID: "CHG-N", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	r := notifysim.NewRecorder(0, nil)
	if err := r.NotifyPreDebit(t.Context(), c, charge.DebitReceipt{Reference: "CBS1"}); err != nil {
		t.Fatal(err)
	}
	got := r.Sent()
	if len(got) != 1 || got[0].Account != "********7890" || got[0].Amount != "INR 25.00" || got[0].Reference != "CBS1" {
		t.Fatalf("sent = %+v", got)
	}
	failing := notifysim.NewRecorder(1, nil)
	if err := failing.NotifyPreDebit(t.Context(), c, charge.DebitReceipt{}); !errors.Is(err, notifysim.ErrInjected) {
		t.Fatalf("err = %v, want ErrInjected", err)
	}
	if len(failing.Sent()) != 0 {
		t.Fatal("a failed notification was recorded as sent")
	}
}

// Advance notices are recorded masked and counted by their key, so that a
// re-send after a crash is recognisable; an injected failure records none.
func TestRecorderCountsAdvanceNoticesByKey(t *testing.T) {
	c := charge.Charge{ID: "CHG-A", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := notifysim.NewRecorder(0, nil)
	for range 2 {
		if err := r.NotifyAdvance(t.Context(), charge.AdvanceNoticeOf(c, at)); err != nil {
			t.Fatal(err)
		}
	}
	want := notifysim.Advance{Key: "CHG-A:advance-notice", ChargeID: "CHG-A", Account: "********7890", Amount: "INR 25.00", DebitOnOrAfter: at,
		Text: "₹25.00 will be debited on or after 2026-12-01 09:00 UTC"}
	got := r.Advances()
	if len(got) != 2 || got[0] != want || r.AdvanceCount("CHG-A:advance-notice") != 2 || r.AdvanceCount("CHG-B:advance-notice") != 0 {
		t.Fatalf("advances %+v, count %d; want %+v twice", got, r.AdvanceCount("CHG-A:advance-notice"), want)
	}
	if len(r.Sent()) != 0 {
		t.Fatal("an advance notice was recorded as a notification after a debit")
	}
	failing := notifysim.NewRecorder(1, nil)
	if err := failing.NotifyAdvance(t.Context(), charge.AdvanceNoticeOf(c, at)); !errors.Is(err, notifysim.ErrInjected) {
		t.Fatalf("err = %v, want ErrInjected", err)
	}
	if len(failing.Advances()) != 0 || failing.AdvanceCount("CHG-A:advance-notice") != 0 {
		t.Fatal("a failed advance notice was recorded")
	}
}
