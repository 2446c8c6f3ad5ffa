package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/audit"
)

// Issue 51: a trail line whose reason, charge id, operator and detail
// hold bidirectional controls (U+202E reverses what follows, U+2066 opens
// an isolate) is listed with them escaped, never raw: the row reads as it
// is stored.
func TestAuditListEscapesBidirectionalControls(t *testing.T) {
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	trail, err := audit.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trail.Append(audit.Entry{Operator: "olga\u202e", Via: "cli", Action: "reopen", ChargeID: "CHG-\u20661",
		Reason: "INC-9 \u202e1-GHC\u2066 approved", Detail: "zero\u200bwidth", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	trail.Close()
	r := runCmd(t.Context(), map[string]string{"IC_AUDIT_FILE": auditFile}, "audit", "list")
	if r.code != 0 {
		t.Fatalf("audit list: %d %s", r.code, r.stderr)
	}
	if strings.ContainsAny(r.stdout, "\u202e\u2066\u200b") {
		t.Fatalf("audit list printed a bidirectional or invisible character raw:\n%q", r.stdout)
	}
	for _, want := range []string{`olga\u202e`, `CHG-\u20661`, `INC-9 \u202e1-GHC\u2066 approved`, `zero\u200bwidth`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("audit list does not show %s:\n%s", want, r.stdout)
		}
	}
}
