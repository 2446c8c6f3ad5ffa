package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/service/bench"
)

// runBench runs bench --json (no progress lines, SQLite's synchronous
// NORMAL, in a folder of its own) with args, and reads its report.
func runBench(t *testing.T, args ...string) bench.Report {
	t.Helper()
	r := runCmd(t.Context(), nil, append(append([]string{"bench"}, args...), "--json", "--progress", "0", "--sqlite-sync", "NORMAL", "--dir", t.TempDir())...)
	if r.code != 0 {
		t.Fatalf("bench exited %d: %s", r.code, r.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json printed %q: %v", r.stdout, err)
	}
	return rep
}

func TestBenchVerifiesExactlyOnceAndCountsTheCalls(t *testing.T) {
	rep := runBench(t, "--charges", "400", "--dup-lag", "50", "--baseline")
	g := rep.Guarded
	dups := g.Messages - g.Charges
	if !g.OK || g.DebitedOnce != 400 || g.DoubleDebits != 0 || g.NotDebited != 0 || dups < 100 || dups > 140 {
		t.Fatalf("guarded = %+v", g)
	}
	// Counted, not assumed, and only what is invariant under any load. The
	// embedded backend claims in the receive's transaction: a fresh charge
	// costs no store call, its DONE is written once with its message's
	// delete (no fault is injected, so nothing retries), and every message
	// is claimed in a receive — a duplicate once more each time it is
	// deferred because the first copy is still running.
	if g.ClaimPath != "queue" || g.StorePerFresh != 0 || g.StoreCalls["claim"] != 0 || g.ResultsWithMessage != 400 ||
		g.ClaimsInReceive < int64(g.Messages) || g.ClaimsInReceive > int64(g.Messages)+int64(dups)/2 ||
		g.DuplicatesDropped+g.DuplicatesDeferred < int64(dups) {
		t.Fatalf("claim path %q, store calls per fresh %v %v, %d results with their message, %d claims in receives for %d messages, dropped %d + deferred %d of %d",
			g.ClaimPath, g.StorePerFresh, g.StoreCalls, g.ResultsWithMessage, g.ClaimsInReceive, g.Messages, g.DuplicatesDropped, g.DuplicatesDeferred, dups)
	}
	// Acks are the duplicates' only (a fresh charge's delete rode with its
	// DONE): at most one ack call per duplicate, fewer when batched.
	if a := g.QueueCalls["ack"]; a < 1 || a > int64(dups) {
		t.Fatalf("ack calls %d for %d duplicates", a, dups)
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
	rep := runBench(t, "--profile", "1s@200,1s@1500,1s@200", "--corebank-load-latency", "50us", "--dup-lag", "50", "--curve-interval", "200ms")
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

// With --poison the bench spreads messages that are not charges among the
// charge messages; the run is OK only if every charge is debited once and
// every poison message is on the DLQ (and none is a duplicate).
func TestBenchWithPoisonDeadLettersEveryPoisonMessage(t *testing.T) {
	rep := runBench(t, "--charges", "300", "--dup-ratio", "0.2", "--dup-lag", "400", "--poison", "0.1")
	g := rep.Guarded
	good := g.Messages - g.Poison
	if !g.OK || g.DebitedOnce != 300 || g.DoubleDebits != 0 || g.Poison != good/10 || g.PoisonOnTheDLQ != g.Poison || g.DuplicatesDropped+g.DuplicatesDeferred < int64(good-300) {
		t.Fatalf("guarded = %+v: want every charge once and all %d poison messages on the DLQ", g, good/10)
	}
	if r := runCmd(t.Context(), nil, "bench", "--poison", "1.5"); r.code != exitUsage || !strings.Contains(r.stderr, "--poison") {
		t.Errorf("bench --poison 1.5: exit %d, %s", r.code, r.stderr)
	}
}
