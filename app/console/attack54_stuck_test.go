package console_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/queue"
)

// A stuck reopened charge with two DLQ entries: an older conflict (the
// charge id reused with another payload, which the console never
// redrives) and its own message. The Stuck page must offer the redrive of
// the entry that delivers it, not the conflict.
func TestAttack54ConsoleStuckRedrivesTheEntryThatDeliversTheCharge(t *testing.T) {
	w := newWorld(t)
	other, err := charge.MarshalEvent(charge.Charge{ID: "CHG-TWICE-1", AccountID: account, Amount: charge.Money{Minor: 99900, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	w.deadLetter(t, other, queue.Reason{Code: chargehandler.Code(charge.Conflict), Detail: "another payload"})
	w.deadLetter(t, []byte(`{"chargeId":"CHG-TWICE-1","garbage":true}`), queue.Reason{Code: chargehandler.Code(charge.Invalid), Detail: "not an event"})
	time.Sleep(2 * time.Millisecond)
	w.reopenedOnTheDLQ(t, "CHG-TWICE-1")
	var own string
	if _, err := w.q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Force: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) {
		if e.Reason.Code == chargehandler.Code(charge.DebitFailed) && chargeIDIn(string(e.Body)) == "CHG-TWICE-1" {
			own = e.ID
		}
	}}); err != nil {
		t.Fatal(err)
	}
	later := func(o *console.Options) { o.Now = func() time.Time { return time.Now().Add(10 * time.Minute) } }
	srv := w.consoleWith(t, proxyAuth(), later)
	for _, path := range []string{"/stuck", "/records?state=IN_PROGRESS"} {
		_, page := as(t, "olga", "GET", srv.URL+path, nil)
		row := rowOf(page, "CHG-TWICE-1")
		mustContain(t, path, row, "its message is on the DLQ")
		m := redriveLinkRE.FindStringSubmatch(page)
		if m == nil || m[1] != url.QueryEscape(own) {
			t.Fatalf("%s: the redrive offered is not of the charge's own message %q (a conflict or a garbled entry is never redriven by the console): %v\n%s", path, own, m, row)
		}
	}
}
