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

// An entry whose charge id a command line's audit line held masked is
// found by the id as read.
func TestAttack54MaskFilterFindsAMaskedID(t *testing.T) {
	f := Filter{ChargeID: "CHG-001234567890"}
	if !f.Match(Entry{ChargeID: "CHG-********7890"}) || !f.Match(Entry{ChargeID: "CHG-001234567890"}) || f.Match(Entry{ChargeID: "CHG-1"}) {
		t.Error("the filter by charge id does not find the entries of the charge (masked or as read) alone")
	}
}
