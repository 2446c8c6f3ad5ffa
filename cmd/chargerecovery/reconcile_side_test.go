package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	dir, env := s.dir, s.env
	var posted []statement.Posting
	for _, id := range []string{"CHG-S-1", "CHG-S-2"} {
		c := s.charge(id)
		s.claim(t, "BANK-", c)
		posted = append(posted, s.posting(c))
	}
	stmt := s.writeStatement(t, "collection.xml", "STMT-S", posted...)
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
