package charge

import (
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

func TestRecordSummaryFromTheSummaryElseTheNotice(t *testing.T) {
	s, ok := RecordSummary(driver.Record{Summary: "2500 INR 7890"})
	if !ok || s.Amount.String() != "INR 25.00" || s.Account() != "****7890" {
		t.Fatalf("summary: %+v %v", s, ok)
	}
	// A record written before summaries: the notice a
	// DEBITED_NOTIFICATION_FAILED record keeps.
	n, err := Notice{ChargeID: "CHG-1", Account: "********4321", Amount: NoticeAmt{Minor: 1999, Currency: "EUR"}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s, ok = RecordSummary(driver.Record{State: driver.StateDone, Status: string(DebitedNotificationFailed), Detail: string(n)})
	if !ok || s.Amount.String() != "EUR 19.99" || s.Account() != "****4321" {
		t.Fatalf("notice: %+v %v", s, ok)
	}
	if s, ok := RecordSummary(driver.Record{State: driver.StateFailed, Detail: "declined: INSUFFICIENT_FUNDS"}); ok {
		t.Fatalf("neither: %+v", s)
	}
}
