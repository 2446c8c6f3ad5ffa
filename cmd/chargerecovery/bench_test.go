package main

import (
	"encoding/json"
	"testing"

	"github.com/finedge/idempotent-consumer/internal/bench"
)

func TestBenchVerifiesExactlyOnceAndCountsTheCalls(t *testing.T) {
	r := runCmd(t.Context(), nil, "bench", "--charges", "400", "--dup-lag", "50", "--baseline", "--json", "--progress", "0",
		"--sqlite-sync", "NORMAL", "--dir", t.TempDir())
	if r.code != 0 {
		t.Fatalf("bench exited %d: %s", r.code, r.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", r.stdout, err)
	}
	g := rep.Guarded
	dups := g.Messages - g.Charges
	if !g.OK || g.DebitedOnce != 400 || g.DoubleDebits != 0 || g.NotDebited != 0 || dups < 100 || dups > 140 {
		t.Fatalf("guarded = %+v", g)
	}
	// Counted, not assumed, and only what is invariant under any load: a
	// fresh charge is a claim and a DONE (no fault is injected, so nothing
	// retries); a duplicate is one claim when the first copy is done, and
	// one more each time it is deferred because the first is still running
	// — so on average between 1 and a bound, never 0.
	if g.StorePerFresh != 2 || g.StorePerDuplicate < 1 || g.StorePerDuplicate > 1.5 || g.DuplicatesDropped+g.DuplicatesDeferred < int64(dups) {
		t.Fatalf("store calls per fresh %v, per duplicate %v, dropped %d + deferred %d of %d",
			g.StorePerFresh, g.StorePerDuplicate, g.DuplicatesDropped, g.DuplicatesDeferred, dups)
	}
	if g.QueueCallsPerMsg <= 0 || g.ChargesPerSecond <= 0 || g.HandlingLatencyMS.P99 < g.HandlingLatencyMS.P50 || g.PeakHeapMB <= 0 {
		t.Fatalf("figures missing: %+v", g)
	}
	b := rep.Baseline
	if b == nil || b.OK || b.DoubleDebits != dups || rep.GuardCost <= 0 {
		t.Fatalf("baseline = %+v, cost %v: want every duplicate double-debited", b, rep.GuardCost)
	}
}
