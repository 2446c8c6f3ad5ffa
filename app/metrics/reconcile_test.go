package metrics_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/metrics"
)

func TestReconciliationFileCountsWhatWasMatchedByKeyOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "recon.prom")
	if err := metrics.WriteReconciliationFile(path, metrics.Reconciliation{Breaks: map[string]int{"amount_mismatch": 1},
		Postings: 10, Matched: 9, KeyOnly: 3, PeriodEnd: time.Unix(1764633600, 0), RunAt: time.Unix(1764640800, 0)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`reconciliation_breaks{kind="amount_mismatch"} 1`, "reconciliation_matched 9", "reconciliation_matched_by_key_only 3"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the metrics file lacks %q:\n%s", want, b)
		}
	}
}
