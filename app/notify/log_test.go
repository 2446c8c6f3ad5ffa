package notify_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/notify"
)

var fee = charge.Charge{ID: "CHG-L", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
	Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}

// line is the one JSON line l wrote.
func line(t *testing.T, out *bytes.Buffer) map[string]any {
	t.Helper()
	if strings.Contains(out.String(), "001234567890") {
		t.Fatalf("the line holds the full account: %s", out)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("not one JSON line: %q (%v)", out, err)
	}
	return m
}

func TestTheNoticesAreOneLineEachWithTheAccountMasked(t *testing.T) {
	var out bytes.Buffer
	l := notify.NewLog(slog.New(slog.NewJSONHandler(&out, nil)))
	if err := l.NotifyPreDebit(t.Context(), fee, charge.DebitReceipt{Reference: "CBS1"}); err != nil {
		t.Fatal(err)
	}
	m := line(t, &out)
	n, _ := m["notice"].(map[string]any)
	if m["msg"] != "pre-debit notice" || n["notificationKey"] != "CHG-L:pre-debit" || n["account"] != "********7890" || n["reference"] != "CBS1" {
		t.Fatalf("pre-debit line %v", m)
	}

	out.Reset()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	if err := l.NotifyAdvance(t.Context(), charge.AdvanceNoticeOf(fee, at)); err != nil {
		t.Fatal(err)
	}
	m = line(t, &out)
	n, _ = m["notice"].(map[string]any)
	if m["msg"] != "advance notice" || n["type"] != "ADVANCE_DEBIT_NOTICE" || n["notificationKey"] != "CHG-L:advance-notice" ||
		n["account"] != "********7890" || n["amountMinor"] != 2500.0 || n["currency"] != "INR" || n["debitOnOrAfter"] != "2026-12-01T09:00:00Z" ||
		n["text"] != "₹25.00 will be debited on or after 2026-12-01 09:00 UTC" {
		t.Fatalf("advance line %v", m)
	}
}
