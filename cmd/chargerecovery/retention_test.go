package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/bench"
	"github.com/finedge/idempotent-consumer/idempotency"
)

func TestPurgeAndTheServeSweeperDeleteOnlyWhatIsPastRetention(t *testing.T) {
	db := filepath.Join(t.TempDir(), "purge.db")
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": db}
	ctx := t.Context()
	b, err := backend.Open(ctx, *backendFor(env), 3*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := bench.SeedExpired(ctx, b.Store, 7); err != nil {
		t.Fatal(err)
	}
	live, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := live.Claim(ctx, "CHG-LIVE", "fp"); err != nil || !c.Outcome.Owned() {
		t.Fatal(c.Outcome, err)
	}
	purge := func(args ...string) backend.SweepCounts {
		t.Helper()
		r := runCmd(ctx, env, append([]string{"purge", "--json"}, args...)...)
		var got struct {
			backend.SweepCounts
			DryRun bool `json:"dry_run"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
			t.Fatalf("purge %v: %d %s %s", args, r.code, r.stdout, r.stderr)
		}
		return got.SweepCounts
	}
	if got := purge("--dry-run"); got.Records != 7 {
		t.Fatalf("dry run: %+v, want 7 records", got)
	}
	if got := purge("--sweep-batch", "3", "--sweep-pause", "0s"); got.Records != 7 {
		t.Fatalf("purge: %+v, want 7 records deleted in batches of 3", got)
	}
	if got := purge("--dry-run"); got.Records != 0 {
		t.Fatalf("after purge: %+v", got)
	}
	if _, err := live.Get(ctx, "CHG-LIVE"); err != nil {
		t.Fatalf("purge deleted a live record: %v", err)
	}

	// serve sweeps by itself, and counts it.
	if err := bench.SeedExpired(ctx, b.Store, 5); err != nil {
		t.Fatal(err)
	}
	if got := purge("--dry-run"); got.Records != 5 {
		t.Fatalf("seeded again: %+v, want 5 records to purge", got)
	}
	bank := httptest.NewServer(corebanksim.Handler(corebanksim.NewLedger(corebanksim.Faults{})))
	defer bank.Close()
	ops := freeAddr(t)
	for k, v := range map[string]string{"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_SWEEP_INTERVAL": "200ms", "IC_HTTP_ADDR": ops} {
		env[k] = v
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() { done <- runCmd(sctx, env, "serve") }()
	// Stop serve once it has counted the sweep (its log line follows the
	// count): stopping it as soon as the records were gone raced the line.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, body := getBody("http://" + ops + "/metrics"); strings.Contains(body, "chargerecovery_records_purged_total 5") {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("serve did not sweep: %s", (<-done).stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := purge("--dry-run"); got.Records != 0 {
		t.Fatalf("after serve's sweep: %+v", got)
	}
	stop()
	r := <-done
	if r.code != 0 || !strings.Contains(r.stderr, `"records_purged":5`) {
		t.Fatalf("serve: %d %s", r.code, r.stderr)
	}
}

func TestServeRefusesARecordRetentionShorterThanTheQueues(t *testing.T) {
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "r.db"), "IC_COREBANK_URL": "http://127.0.0.1:1", "IC_HTTP_ADDR": "127.0.0.1:0"}
	r := runCmd(t.Context(), env, "serve", "--retention", "400h") // < 96h + 336h
	if r.code != 2 || !strings.Contains(r.stderr, "shorter than the queue's message retention 96h0m0s plus the DLQ's 336h0m0s") ||
		!strings.Contains(r.stderr, "at least 432h0m0s") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if r := runCmd(ctx, env, "serve", "--retention", "100h", "--queue-retention", "24h", "--dlq-retention", "72h", "--shutdown-timeout", "1s"); r.code != 0 {
		t.Fatalf("a retention covering both queues was refused: %s", r.stderr)
	}
}

func TestServeOnAWSReadsTheQueuesRetention(t *testing.T) {
	emulatorInParallel(t)
	env := awsSetup(t, "ret")
	env["IC_COREBANK_URL"], env["IC_HTTP_ADDR"] = "http://127.0.0.1:1", ""
	r := runCmd(t.Context(), env, "serve", "--retention", "300h") // setup: 4 days + 14 days = 432h
	if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("at least %s", 432*time.Hour)) {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}
