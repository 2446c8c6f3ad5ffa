package main

import (
	"encoding/json"
	"strings"
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

// The month-end mode sends while the consumer runs, by its profile, to a
// bank that slows under load: every charge debited once, the backlog
// curve from the first send to the drained queue, and each charge's wait
// from its send to its debit.
func TestBenchMonthEndModeDrainsABurstExactlyOnce(t *testing.T) {
	r := runCmd(t.Context(), nil, "bench", "--profile", "1s@200,1s@1500,1s@200", "--corebank-load-latency", "50us",
		"--dup-lag", "50", "--curve-interval", "200ms", "--json", "--progress", "0", "--sqlite-sync", "NORMAL", "--dir", t.TempDir())
	if r.code != 0 {
		t.Fatalf("bench exited %d: %s", r.code, r.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", r.stdout, err)
	}
	g := rep.Guarded
	if !g.OK || g.Charges != 1900 || g.DebitedOnce != 1900 || g.DoubleDebits != 0 || g.Burst == nil {
		t.Fatalf("guarded = %+v", g)
	}
	s := g.Burst
	if len(s.Curve) < 10 || len(s.Profile) != 3 || s.TimeToDebitMS.P99 < s.TimeToDebitMS.P50 || s.TimeToDebitMS.P50 <= 0 {
		t.Fatalf("burst stats = %+v", s)
	}
	last := s.Curve[len(s.Curve)-1]
	if last.Sent != int64(g.Messages) || last.Decided != int64(g.Messages) || last.Backlog != 0 {
		t.Fatalf("the curve ends at %+v, want every one of %d messages sent and decided", last, g.Messages)
	}
	// Sending was paced: a third of the way through the profile's time,
	// not everything had been sent yet.
	for _, p := range s.Curve {
		if p.Seconds <= 1 && p.Sent > 600 {
			t.Fatalf("by %.1fs %d messages were sent, more than the profile's first phase allows", p.Seconds, p.Sent)
		}
	}
	if bad := runCmd(t.Context(), nil, "bench", "--profile", "10s"); bad.code != 2 || !strings.Contains(bad.stderr, "DURATION@RATE") {
		t.Fatalf("a bad profile: exit %d %q", bad.code, bad.stderr)
	}
}
