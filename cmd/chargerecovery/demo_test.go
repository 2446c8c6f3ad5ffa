package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/service/bench"
	"github.com/finedge/idempotent-consumer/app/service/demo"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
)

func runDemoJSON(t *testing.T, args ...string) demo.Report {
	t.Helper()
	r := runCmd(t.Context(), nil, append([]string{"demo", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("demo exited %d: %s %s", r.code, r.stdout, r.stderr)
	}
	var rep demo.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("demo --json printed %q: %v", r.stdout, err)
	}
	return rep
}

func wantExactlyOnce(t *testing.T, rep demo.Report, charges, sent int) {
	t.Helper()
	if !rep.OK || rep.Charges != charges || rep.MessagesSent != sent || rep.DebitedOnce != charges ||
		rep.DoubleDebits != 0 || rep.DuplicateRequests != 0 || rep.NotDebited != 0 {
		t.Fatalf("report = %+v", rep)
	}
	if rep.Outcomes["processed"] != charges {
		t.Fatalf("processed %d, want %d", rep.Outcomes["processed"], charges)
	}
	if rep.DuplicatesDropped != sent-charges {
		t.Fatalf("duplicates dropped %d, want %d", rep.DuplicatesDropped, sent-charges)
	}
}

func TestDemoIsHermeticTwiceInARow(t *testing.T) {
	for range 2 {
		wantExactlyOnce(t, runDemoJSON(t), 20, 26)
	}
}

func TestDemoSummaryIsReadable(t *testing.T) {
	r := runCmd(t.Context(), nil, "demo", "--charges", "5", "--dup-ratio", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "OK: every charge was debited exactly once") ||
		!strings.Contains(r.stdout, "messages sent       10 (5 redeliveries") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestDemoUnderCoreBankingFaultsStillDebitsEachChargeOnce(t *testing.T) {
	rep := runDemoJSON(t, "--charges", "60", "--transient-rate", "0.2", "--lost-response-rate", "0.1", "--seed", "7",
		// and a bank as hostile as real ones: 409 while a key is in
		// progress, posts slower than the client's timeout, 502 and resets
		// after posting, debits that never answer
		"--in-progress-409", "--slow-rate", "0.1", "--slow-latency", "1s", "--corebank-timeout", "300ms",
		"--bad-gateway-rate", "0.05", "--reset-rate", "0.05", "--timeout-rate", "0.05")
	wantExactlyOnce(t, rep, 60, 78)
	if rep.Retries == 0 {
		t.Fatal("no fault was injected; the test proves nothing")
	}
}

func TestDemoOnTheAWSEmulator(t *testing.T) {
	useEmulator(t)
	wantExactlyOnce(t, runDemoJSON(t, "--backend", "aws"), 20, 26)
}

func TestDemoRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--charges", "0"}, {"--dup-ratio", "2"}, {"--backend", "redis"}, {"--store", "redis"}, {"--backend", "postgres", "--postgres-url", "postgres://%zz"}, {"--transient-rate", "1"}} {
		r := runCmd(t.Context(), nil, append([]string{"demo"}, args...)...)
		if r.code != exitUsage {
			t.Errorf("demo %v: exit %d, want 2 (%s)", args, r.code, r.stderr)
		}
	}
}

// Without the claim, every redelivery reaches core banking again: the
// demo's check must see it and fail.
func TestDemoWithoutTheGuardFailsWithChargesAskedAgain(t *testing.T) {
	r := runCmd(t.Context(), nil, "demo", "--json", "--baseline", "--charges", "30", "--dup-ratio", "0.5", "--seed", "3")
	if r.code != exitFailed {
		t.Fatalf("baseline demo exited %d, want 1: %s", r.code, r.stderr)
	}
	var rep demo.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.OK || rep.AskedAgain != 15 || rep.DoubleDebits != 0 || rep.DuplicateRequests != 15 || rep.NotDebited != 0 {
		t.Fatalf("baseline report = %+v, want the 15 redelivered charges asked again (the simulated bank's key kept each to one posting)", rep)
	}
}

func TestDemoOnPostgreSQLAndWithTheRedisStoreTwiceInARow(t *testing.T) {
	t.Parallel()
	pgtest.Open(t) // fails in CI, skips elsewhere, when a server is missing
	dbtest.Redis(t)
	pg, rd := "--postgres-url="+dbtest.PostgresURL(), "--redis-url="+dbtest.RedisURL()
	for _, args := range [][]string{
		{"--backend", "postgres", pg},
		{"--store", "redis", rd},
		{"--backend", "postgres", "--store", "redis", pg, rd},
	} {
		for range 2 {
			wantExactlyOnce(t, runDemoJSON(t, args...), 20, 26)
		}
	}
}

func TestBenchOnPostgreSQLAndWithTheRedisStore(t *testing.T) {
	t.Parallel()
	pgtest.Open(t)
	dbtest.Redis(t)
	for _, tc := range []struct {
		args []string
		path string // where the claims ride
	}{
		{[]string{"--backend", "postgres", "--postgres-url=" + dbtest.PostgresURL()}, "queue"},
		{[]string{"--backend", "postgres", "--postgres-url=" + dbtest.PostgresURL(), "--colocate", "off"}, "store"},
		{[]string{"--store", "redis", "--redis-url=" + dbtest.RedisURL(), "--sqlite-sync", "NORMAL", "--dir", t.TempDir()}, "store"},
		{[]string{"--colocate", "off", "--sqlite-sync", "NORMAL", "--dir", t.TempDir()}, "store"},
	} {
		args := tc.args
		for range 2 {
			// Duplicates 200 messages after their original: none meets its
			// original still in progress (that one would wait out the lease).
			r := runCmd(t.Context(), nil, append([]string{"bench", "--charges", "300", "--dup-lag", "200", "--json", "--progress", "0"}, args...)...)
			if r.code != 0 {
				t.Fatalf("bench %v exited %d: %s", args, r.code, r.stderr)
			}
			var rep bench.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("bench --json printed %q: %v", r.stdout, err)
			}
			g := rep.Guarded
			if !g.OK || g.DebitedOnce != 300 || g.DoubleDebits != 0 || g.ClaimPath != tc.path {
				t.Fatalf("bench %v: %+v", args, g)
			}
			// A claim and a DONE per fresh charge: store calls of their
			// own, or in the queue's transactions (no store call). On a
			// loaded machine (-race, every package at once) a duplicate can
			// still meet its original in progress 200 messages later and be
			// claimed by a store call when it comes back: timing, not the
			// path — every result still rides with its message.
			if (tc.path == "store" && (g.StorePerFresh < 2 || g.StorePerFresh > 2.05)) || (tc.path == "queue" && (g.StorePerFresh > 0.05 || g.ResultsWithMessage != 300)) {
				t.Fatalf("bench %v: %q path, %.2f store calls per fresh charge, %d results with their message", args, tc.path, g.StorePerFresh, g.ResultsWithMessage)
			}
		}
	}
}

// The demo over mutual TLS and OAuth2: certificates made at start, tokens
// valid 2 s that expire during the run; every charge debited once.
func TestSecureDemoOverMutualTLSAndOAuth2(t *testing.T) {
	t.Parallel()
	rep := runDemoJSON(t, "--secure", "--charges", "120", "--corebank-latency", "120ms", "--concurrency", "8")
	wantExactlyOnce(t, rep, 120, 156)
	var tokens int
	if _, err := fmt.Sscanf(rep.Bank, "mutual TLS + OAuth2 client credentials (%d tokens issued", &tokens); err != nil || tokens < 2 {
		t.Fatalf("bank %q: want mutual TLS + OAuth2 with tokens expiring during the run", rep.Bank)
	}
}

// demo --reconcile: the simulator's ledger exported as a camt.053
// statement of the run's period and reconciled against the records, with
// declines and lost responses on the way: every posting matched, 0
// breaks, exit 0. Without the claim (--baseline) there are no records to
// match and the reconciliation says so.
func TestDemoReconcileFindsNoBreaks(t *testing.T) {
	r := runCmd(t.Context(), nil, "demo", "--reconcile", "--charges", "10")
	if r.code != 0 || !strings.Contains(r.stdout, "reconciliation: 10 postings, 10 matched, 0 breaks") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	rep := runDemoJSON(t, "--reconcile", "--charges", "20", "--decline-rate", "0.2", "--lost-response-rate", "0.2", "--seed", "11")
	rc := rep.Reconciliation
	if rc == nil || rc.Breaks != 0 || rc.Postings != 16 || rc.Matched != 16 || rc.CollectionAccount != "FEES-COLLECTION" || rc.Unverified != 0 {
		t.Fatalf("reconciliation = %+v", rc)
	}
	if rep.Declined != 4 || rep.DebitedOnce != 16 {
		t.Fatalf("report = %+v", rep)
	}

	r = runCmd(t.Context(), nil, "demo", "--reconcile", "--baseline", "--charges", "5", "--dup-ratio", "0")
	if r.code == 0 || !strings.Contains(r.stdout, "unknown_posting") || !strings.Contains(r.stderr, "reconciliation found 5 breaks") {
		t.Fatalf("baseline: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
