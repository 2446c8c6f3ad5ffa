package audit

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// chargerecovery audit prints a charge id as every view shows it
// (charge.ShowID): one holding an account's digits keeps its last four.
func TestAttack54MaskPrintEntriesChargeID(t *testing.T) {
	var buf bytes.Buffer
	PrintEntries(&buf, []Entry{{Seq: 1, At: time.Now(), Operator: "olga", Via: "console", Action: "redrive", ChargeID: "CHG-001234567890", Result: "moved"},
		{Seq: 2, At: time.Now(), Operator: "olga", Via: "console", Action: "redrive", ChargeID: "CHG-2026-11-000123", Result: "moved"}})
	if out := buf.String(); strings.Contains(out, "12345678") || !strings.Contains(out, "CHG-********7890") || !strings.Contains(out, "CHG-2026-11-000123") {
		t.Errorf("audit lines:\n%s", out)
	}
}
