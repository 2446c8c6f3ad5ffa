package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// A collection account's statement read without --collection-account is
// refused (exit 2, naming the flag and the account; no metrics file
// written), rather than read as customers' statements with every charge
// recorded_not_posted. With the flag it reconciles.
func TestReconcileCollectionStatementWithoutTheFlag(t *testing.T) {
	ctx := t.Context()
	s := newReconcileSetup(t, t.TempDir(), map[string]string{"IC_OPERATOR": "asha"}, idempotency.Options{})
	dir, env, fp, g, today := s.dir, s.env, s.fp, s.g, s.today
	var posted []statement.Posting
	for _, id := range []string{"CHG-S-1", "CHG-S-2"} {
		c := charge.Charge{ID: id, AccountID: "001234567890" + id[len(id)-1:], Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: today}
		cl, err := g.Claim(ctx, c.ID, c.Fingerprint(fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if err := g.Complete(ctx, cl.Lease(), string(charge.Debited), "BANK-"+c.ID); err != nil {
			t.Fatal(err)
		}
		req := c.DebitRequest()
		posted = append(posted, statement.Posting{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: c.Amount, BookingDate: today,
			Reference: "BANK-" + c.ID, Narrative: req.Narrative})
	}
	stmt := filepath.Join(dir, "collection.xml")
	f, err := os.Create(stmt)
	if err != nil {
		t.Fatal(err)
	}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-S", Account: "FEES-001", Created: time.Now(),
		Period: statement.Period{From: today, To: today.AddDate(0, 0, 1)}}, posted); err != nil {
		t.Fatal(err)
	}
	f.Close()
	metricsFile := filepath.Join(dir, "recon.prom")

	r := runCmd(ctx, env, "reconcile", "--statement", stmt, "--metrics-file", metricsFile)
	if r.code != 2 || !strings.Contains(r.stderr, "--collection-account") || !strings.Contains(r.stderr, "FEES-001") {
		t.Fatalf("a collection statement without --collection-account: exit %d, want 2 naming the flag and FEES-001\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(metricsFile); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote the metrics file (%v)", err)
	}
	t.Logf("refused: %s", r.stderr)
	r = runCmd(ctx, env, "reconcile", "--statement", stmt, "--collection-account", "FEES-001", "--metrics-file", metricsFile)
	if r.code != 0 || !strings.Contains(r.stdout, "2 matched") {
		t.Fatalf("with --collection-account FEES-001: exit %d, want 0 with 2 matched\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
