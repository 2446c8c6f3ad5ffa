package operate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memstore"
)

// Attack 54: an operator's reopen reason is free text; one that names the
// customer's account (typed on the command line) must not be kept in
// clear in the record (its reason and history, which the console and
// `show` display) nor in the command's audit log line.
func TestAttack54ConsoleAReopenReasonIsKeptMasked(t *testing.T) {
	const account = "001234567890"
	store := memstore.New()
	g, err := idempotency.NewGuard(store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := g.Claim(t.Context(), "CHG-RSN-1", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(t.Context(), cl.Lease(), "FAILED", "core banking unavailable"); err != nil {
		t.Fatal(err)
	}
	var out, audit bytes.Buffer
	if err := ReopenCharge(t.Context(), store, ReopenOptions{ID: "CHG-RSN-1", Reason: "INC-7: customer paid into " + account, Operator: "olga", Out: &out, Audit: &audit}); err != nil {
		t.Fatal(err)
	}
	rec, err := g.Get(t.Context(), "CHG-RSN-1")
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"the record's reason": rec.ReopenReason, "its history": strings.Join(rec.History, "\n"), "the audit line": audit.String(), "the output": out.String()} {
		if strings.Contains(s, account) {
			t.Fatalf("%s keeps the account in clear: %s", what, s)
		}
	}
	if !strings.Contains(rec.ReopenReason, "INC-7: customer paid into") {
		t.Fatalf("the reason is lost: %q", rec.ReopenReason)
	}
}
