package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reconciliation is one reconciliation run as metrics: the open breaks
// by kind (every kind named, 0 included, so that an alert on a kind sees a
// series), the postings read and matched, and when the run finished.
type Reconciliation struct {
	Breaks   map[string]int
	Postings int
	Matched  int
	// KeyOnly: matched by key only, the amount not compared
	// (reconcile.Report.Unverified).
	KeyOnly          int
	Resolved         int
	PeriodEnd, RunAt time.Time
}

// WriteReconciliationFile writes r in Prometheus's text format to path, for
// node_exporter's textfile collector (or any file-reading scraper): a
// batch job has no /metrics of its own. The file is written whole by
// rename (client_golang's WriteToTextfile), so a scrape never reads half.
func WriteReconciliationFile(path string, r Reconciliation) error {
	reg := prometheus.NewRegistry()
	breaks := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reconciliation_breaks",
		Help: "Open breaks of the last reconciliation run, by kind (resolved ones left out)."}, []string{"kind"})
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	reg.MustRegister(breaks)
	for kind, n := range r.Breaks {
		breaks.WithLabelValues(kind).Set(float64(n))
	}
	gauge("reconciliation_postings", "Postings of ours read from the statement(s) of the last run.", float64(r.Postings))
	gauge("reconciliation_matched", "Charges whose posting matched a DONE record in the last run.", float64(r.Matched))
	gauge("reconciliation_matched_by_key_only", "Charges of the last run matched by key only: the posting's amount and account not compared with the record (records written before summaries, posted without the narrative).", float64(r.KeyOnly))
	gauge("reconciliation_resolved", "Breaks of the last run left out because an operator resolved them.", float64(r.Resolved))
	gauge("reconciliation_period_end_timestamp_seconds", "End of the period the last run reconciled (Unix seconds).", float64(r.PeriodEnd.Unix()))
	gauge("reconciliation_last_run_timestamp_seconds", "When the last reconciliation run finished (Unix seconds).", float64(r.RunAt.Unix()))
	if dir := filepath.Dir(path); dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--metrics-file %s: its directory %s does not exist", path, dir)
		}
	}
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return fmt.Errorf("--metrics-file %s: %w", path, err)
	}
	return nil
}
