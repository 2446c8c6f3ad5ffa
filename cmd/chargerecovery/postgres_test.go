package main

import (
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

// Three serve processes share one PostgreSQL database while one of them is
// SIGKILLed and replaced every second for 20 s: every charge is posted
// once and recorded DONE, and nothing reaches the DLQ.
func TestThreePostgresConsumersWithOneKilledEverySecond(t *testing.T) {
	t.Parallel()
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 150 * time.Millisecond})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	schema := dbtest.Schema(t)
	env := map[string]string{
		"IC_BACKEND": "postgres", "IC_POSTGRES_URL": dbtest.PostgresURL(), "IC_POSTGRES_SCHEMA": schema,
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_CONCURRENCY": "2",
		"IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_SKEW_MARGIN": "500ms", "IC_MAX_RECEIVE": "100",
		"IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_LEVEL": "warn",
	}
	ctx := t.Context()
	var bc backend.Config
	bc.FreshDefaults()
	bc.Kind, bc.PostgresURL, bc.PostgresSchema, bc.Queue, bc.MaxReceive = backend.Postgres, dbtest.PostgresURL(), schema, "charge-due-events", 100
	b, err := backend.Open(ctx, bc, 3*time.Second, false)
	if err != nil {
		pgtest.Open(t) // fails in CI, skips elsewhere, saying how to start PostgreSQL
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	const n = 500
	var msgs []queue.Outgoing
	var ids []string
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-PG-%03d", i), AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
		msgs = append(msgs, queue.Outgoing{Body: body})
		if i%5 < 2 { // 40% resent
			msgs = append(msgs, queue.Outgoing{Body: body})
		}
	}
	if _, err := b.Queue.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	procs := []*exec.Cmd{child(t, env, "serve"), child(t, env, "serve"), child(t, env, "serve")}
	kills, midWork := 0, 0
	for i := range 20 {
		time.Sleep(time.Second)
		victim := i % 3
		if len(ledger.PostingsByKey()) < n {
			midWork++
		}
		_ = procs[victim].Process.Kill()
		_ = procs[victim].Wait()
		kills++
		procs[victim] = child(t, env, "serve")
	}
	if midWork < 10 {
		t.Fatalf("only %d of %d kills came while charges were still unposted: the test proves little", midWork, kills)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		d, err := b.Queue.Depth(ctx)
		if err == nil && d.Waiting+d.InFlight == 0 && len(ledger.PostingsByKey()) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: depth %+v, %d of %d posted", d, len(ledger.PostingsByKey()), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopAll(t, procs...)
	for k, c := range ledger.PostingsByKey() {
		if c != 1 {
			t.Errorf("%s posted %d times", k, c)
		}
	}
	for _, id := range ids {
		r, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || r.State != driver.StateDone {
			t.Fatalf("record %s: %+v %v, want DONE", id, r, err)
		}
	}
	if d, err := b.Queue.Depth(ctx); err != nil || d.DLQ != 0 {
		t.Fatalf("DLQ holds %d (%v), want none", d.DLQ, err)
	}
	t.Logf("%d kills (%d while charges were unposted); %d debit requests after a confirmed posting (crashes between the debit and DONE, absorbed by the key)",
		kills, midWork, len(ledger.DuplicateRequests()))
}

// A PostgreSQL pool too small for the receivers serve runs is refused at
// start, saying what to set; without pool_max_conns serve sizes the pool
// for its receivers itself.
func TestServeRefusesAPostgresPoolTooSmallForItsReceivers(t *testing.T) {
	t.Parallel()
	pgtest.Open(t) // fails in CI, skips elsewhere, when the server is not there
	for _, tc := range []struct {
		url       string
		receivers string
		refused   bool
	}{
		{dbtest.PostgresURL() + "&pool_max_conns=4", "", true},   // 4 receivers by default where claims ride in the queue
		{dbtest.PostgresURL() + "&pool_max_conns=5", "3", false}, // 3 + 2
		{dbtest.PostgresURL() + "&pool_max_conns=8", "8", true},
		{dbtest.PostgresURL(), "16", false},
	} {
		env := map[string]string{"IC_BACKEND": "postgres", "IC_POSTGRES_URL": tc.url, "IC_POSTGRES_SCHEMA": dbtest.Schema(t),
			"IC_COREBANK_URL": "http://127.0.0.1:1", "IC_RECEIVERS": tc.receivers}
		r := runCmd(t.Context(), env, "serve")
		if tc.refused {
			if r.code != exitUsage || !strings.Contains(r.stderr, "too small for") || !strings.Contains(r.stderr, "set pool_max_conns to at least") {
				t.Errorf("receivers %q with %s: exit %d, %s; want 2 saying the pool is too small", tc.receivers, tc.url, r.code, r.stderr)
			}
			continue
		}
		// Past the pool check: it stops at the schema setup has not made.
		if r.code != exitFailed || !strings.Contains(r.stderr, "run chargerecovery setup") {
			t.Errorf("receivers %q with %s: exit %d, %s; want the pool accepted (and the missing schema named)", tc.receivers, tc.url, r.code, r.stderr)
		}
	}
}
