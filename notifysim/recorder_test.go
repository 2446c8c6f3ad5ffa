package notifysim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/notifysim"
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
