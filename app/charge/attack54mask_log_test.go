package charge_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// A charge's log line shows its id as every view does (charge.ShowID with
// its own account): an id holding the account does not put it in a log.
func TestAttack54MaskLogValueChargeID(t *testing.T) {
	for _, tt := range []struct{ id, account, want string }{
		{"CHG-001234567890", "001234567890", "CHG-********7890"},
		{"CHG-123-4567", "1234567", "CHG-***-4567"},
		{"CHG-2026-11-000123", "001234567890", "CHG-2026-11-000123"},
	} {
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "charge", charge.Charge{ID: tt.id, AccountID: tt.account})
		if !strings.Contains(buf.String(), "charge.charge_id="+tt.want+" ") {
			t.Errorf("id %q logged as: %s want %s", tt.id, buf.String(), tt.want)
		}
	}
}
