package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// The command line's reconcile output for a statement with a credit whose
// end-to-end id is the payer's account number: text, CSV, JSON, the kept
// report, the resolve under the masked id and the audit trail hold the
// number masked, never whole; our own charge's key reads as it is.
func TestReconcileOutputMasksAForeignKeyThatIsAnAccountNumber(t *testing.T) {
	const payer = "123456789012"
	ctx := t.Context()
	s := newReconcileSetup(t, t.TempDir(), map[string]string{"IC_OPERATOR": "asha"}, idempotency.Options{})
	dir, env, fp, g, today := s.dir, s.env, s.fp, s.g, s.today
	audit := filepath.Join(dir, "audit.jsonl")
	own := charge.Charge{ID: "CHG-M-1", AccountID: "009988776655", Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: today}
	cl, err := g.Claim(ctx, own.ID, own.Fingerprint(fp))
	if err != nil || !cl.Outcome.Owned() {
		t.Fatalf("claim: %v %v", cl.Outcome, err)
	}
	if err := g.Fail(ctx, cl.Lease(), string(charge.Failed), "debit declined: INSUFFICIENT_FUNDS"); err != nil {
		t.Fatal(err)
	}
	req := own.DebitRequest()
	stmt := s.writeStatement(t, "camt053.xml", "STMT-M",
		statement.Posting{BankKey: req.IdempotencyKey, Account: own.AccountID, Amount: own.Amount, BookingDate: today, Reference: "BANK-M-1", Narrative: req.Narrative},
		statement.Posting{BankKey: payer, Account: payer, Amount: charge.Money{Minor: 100000, Currency: "INR"}, BookingDate: today, Reference: "NEFT-IN-" + payer})
	report := filepath.Join(dir, "recon.json")
	check := func(what, out string) {
		t.Helper()
		if strings.Contains(out, payer) || strings.Contains(out, "56789012") {
			t.Errorf("%s shows the payer's account:\n%s", what, out)
		}
	}
	for _, args := range [][]string{{}, {"--csv"}, {"--json", "--report-file", report}} {
		r := runCmd(ctx, env, append([]string{"reconcile", "--statement", stmt, "--collection-account", "FEES-001"}, args...)...)
		if r.code != 1 {
			t.Fatalf("reconcile %q: exit %d, want 1 (breaks)\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		check("reconcile "+strings.Join(args, " "), r.stdout+r.stderr)
		if !strings.Contains(r.stdout, own.ID) || !strings.Contains(r.stdout, "********9012") {
			t.Errorf("reconcile %q does not show our charge %s and the masked key:\n%s", args, own.ID, r.stdout)
		}
	}
	kept, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	check("the kept report", string(kept))
	r := runCmd(ctx, env, "reconcile", "resolve", "--statement", stmt, "--collection-account", "FEES-001", "--kind", "unknown_posting",
		"--reason", "INC-9: a credit, not ours", "--json", "********9012")
	if r.code != 0 {
		t.Fatalf("resolve under the masked id: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	check("reconcile resolve", r.stdout+r.stderr)
	trail, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	check("the audit trail", string(trail))
	if !strings.Contains(string(trail), "********9012") {
		t.Errorf("the trail does not name the break's masked key:\n%s", trail)
	}
}
