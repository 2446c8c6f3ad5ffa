package status_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/service/status"
)

// A record written before answers were cleaned may hold terminal escapes:
// inspect prints it without them.
func TestPrintRecordDropsControlCharacters(t *testing.T) {
	now := time.Now()
	var out bytes.Buffer
	status.PrintRecord(&out, driver.Record{Key: "CHG-1", State: driver.StateFailed, Status: "FAILED",
		Detail: "debit declined: \x1b[2J\x1b]0;owned\x07FROZEN", History: []string{"gen 1 \x1b[31mFAILED"},
		Fingerprint: "abc", Token: "t", UpdatedAt: now}, now)
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("inspect printed control characters:\n%q", out.String())
	}
	if !strings.Contains(out.String(), "debit declined: [2J]0;ownedFROZEN") {
		t.Errorf("the detail is gone:\n%s", out.String())
	}
}
