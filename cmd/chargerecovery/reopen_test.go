package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// reopenScenario: charges recorded FAILED by a 401 (a consumer configured
// to take the gateway's 401 as a decline, as this one did before the bank
// boundary was fixed) → fix → reopen → redrive → each debited once, DONE,
// with the audit trail in the record.
func reopenScenario(t *testing.T, env map[string]string) {
	ledger := corebanksim.NewLedger(corebanksim.Faults{OutageStatus: 401, OutageUntil: time.Now().Add(time.Hour)})
	b := withBank(t, env, ledger, nil)
	ctx := t.Context()
	run := backend.RandomID()
	ids := []string{"CHG-RO-" + run + "-1", "CHG-RO-" + run + "-2", "CHG-RO-" + run + "-3"}
	for i, id := range ids {
		if r := runCmd(ctx, env, "send", "--charge-id", id, "--account", fmt.Sprintf("0012345678%02d", i), "--amount-minor", "2500"); r.code != 0 {
			t.Fatalf("send: %s", r.stderr)
		}
	}
	all := func(state driver.State) func() bool {
		return func() bool {
			for _, id := range ids {
				rec, err := b.Store.Get(ctx, id, time.Now())
				if err != nil || rec.State != state {
					return false
				}
			}
			d, err := b.Queue.Depth(ctx)
			return err == nil && d.Waiting+d.InFlight == 0 && (state != driver.StateFailed || d.DLQ == len(ids))
		}
	}

	// 1. The misconfigured consumer records every charge FAILED on the 401.
	serveUntil(t, env, []string{"--corebank-declines", "422:DECLINED,401:UNAUTHORIZED"}, all(driver.StateFailed))
	if n := len(ledger.Entries()); n != 0 {
		t.Fatalf("%d postings during the 401 window", n)
	}

	// 2. Fix the cause (the gateway token) and reopen each charge: under
	// its key (--same-key), since the 401 was never the bank's final word
	// (a plain reopen of what the record calls a decline is refused).
	ledger.SetFaults(corebanksim.Faults{})
	for _, id := range ids {
		r := runCmd(ctx, env, "reopen", id, "--same-key", "--reason", "INC-4711: gateway token renewed")
		if r.code != 0 || !strings.Contains(r.stdout, "reopened "+id) || !strings.Contains(r.stdout, "redrive --charge-id "+id) {
			t.Fatalf("reopen %s: %d %s %s", id, r.code, r.stdout, r.stderr)
		}
		var audit map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stderr)), &audit); err != nil || audit["audit"] != true ||
			audit["charge_id"] != id || audit["previous_status"] != "FAILED" || audit["reason"] != "INC-4711: gateway token renewed" {
			t.Fatalf("audit line %q (%v)", r.stderr, err)
		}
	}
	if r := runCmd(ctx, env, "reopen", ids[0], "--reason", "twice"); r.code != 1 || !strings.Contains(r.stderr, "not FAILED") {
		t.Fatalf("reopening a reopened charge: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, env, "reopen", ids[0]); r.code != 2 || !strings.Contains(r.stderr, "--reason is required") {
		t.Fatalf("reopen without a reason: %d %s", r.code, r.stderr)
	}

	// 3. Redrive the dead-lettered messages; the fixed consumer debits each once.
	r := runCmd(ctx, env, "redrive", "--reason", "debit_failed", "--json")
	var rep queue.RedriveReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Moved != len(ids) {
		t.Fatalf("redrive: %d %s %s", r.code, r.stdout, r.stderr)
	}
	serveUntil(t, env, nil, all(driver.StateDone))
	posted := ledger.PostingsByKey()
	for _, id := range ids {
		if posted[id] != 1 {
			t.Errorf("%s posted %d times, want 1", id, posted[id])
		}
		rec, err := b.Store.Get(ctx, id, time.Now())
		if err != nil || rec.State != driver.StateDone || rec.Reopens != 1 || rec.PrevStatus != "FAILED" ||
			!strings.Contains(rec.PrevDetail, "UNAUTHORIZED") || rec.ReopenReason != "INC-4711: gateway token renewed" || rec.Attempt != 2 {
			t.Errorf("%s: record %+v (%v), want DONE with the reopening's audit trail", id, rec, err)
		}
	}
	if r := runCmd(ctx, env, "inspect", ids[0]); r.code != 0 || !strings.Contains(r.stdout, "reopened") || !strings.Contains(r.stdout, "INC-4711") {
		t.Fatalf("inspect: %s %s", r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "reopen", ids[0], "--reason", "again"); r.code != 1 || !strings.Contains(r.stderr, "is DONE") {
		t.Fatalf("reopening a DONE charge: %d %s", r.code, r.stderr)
	}
}

// withBank points env at a bank serving ledger (a poll wait of 1 s,
// visibility and lease 3 s, an ephemeral health port, JSON logs, and
// extra on top) and opens its backend.
func withBank(t *testing.T, env map[string]string, ledger *corebanksim.Ledger, extra map[string]string) *backend.Backend {
	t.Helper()
	for k, v := range map[string]string{"IC_COREBANK_URL": simBank(t, ledger), "IC_POLL_WAIT": "1s", "IC_VISIBILITY": "3s",
		"IC_LEASE": "3s", "IC_HTTP_ADDR": "127.0.0.1:0", "IC_LOG_FORMAT": "json"} {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return openBackend(t, env)
}

// serveUntil runs serve (in process) with extra flags until done holds,
// then stops it; serve must exit 0.
func serveUntil(t *testing.T, env map[string]string, extra []string, done func() bool) {
	t.Helper()
	sctx, stop := context.WithCancel(t.Context())
	out := make(chan result, 1)
	go func() { out <- runCmd(sctx, env, append([]string{"serve"}, extra...)...) }()
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("serve did not get there: %s", (<-out).stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if r := <-out; r.code != 0 {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
}

func TestReopenOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	reopenScenario(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "reopen.db")})
}

func TestReopenOnPostgreSQL(t *testing.T) {
	t.Parallel()
	reopenScenario(t, pgEnv(t))
}

func TestReopenWithTheRedisStore(t *testing.T) {
	t.Parallel()
	reopenScenario(t, redisEnv(t, filepath.Join(t.TempDir(), "reopen.db")))
}

func TestReopenOnAWS(t *testing.T) {
	emulatorInParallel(t)
	reopenScenario(t, awsSetup(t, "reopen", "--visibility", "3s"))
}

// retriedDeclineScenario: a charge declined for INSUFFICIENT_FUNDS; the
// funds arrive. A plain reopen is refused; forced under the same key
// (--same-key) the bank replays its final decline (FAILED again, never
// posted); reopened with --new-attempt it is
// posted once under <id>~2, and the record keeps both generations'
// outcomes.
func retriedDeclineScenario(t *testing.T, env map[string]string) {
	const acct = "001234567899"
	ledger := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{acct: "INSUFFICIENT_FUNDS"}})
	b := withBank(t, env, ledger, map[string]string{"IC_COREBANK_ENQUIRY": "true"})
	ctx := t.Context()
	id := "CHG/2026/11/" + backend.RandomID() // an id with '/', as billing systems make them
	if r := runCmd(ctx, env, "send", "--charge-id", id, "--account", acct, "--amount-minor", "2500"); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	failedAgain := func(reopens int) func() bool {
		return func() bool {
			rec, err := b.Store.Get(ctx, id, time.Now())
			d, derr := b.Queue.Depth(ctx)
			return err == nil && rec.State == driver.StateFailed && rec.Reopens == reopens && derr == nil && d.Waiting+d.InFlight == 0 && d.DLQ == 1
		}
	}
	serve := func(done func() bool) { t.Helper(); serveUntil(t, env, nil, done) }
	redrive := func() {
		t.Helper()
		if r := runCmd(ctx, env, "redrive", "--reason", "debit_failed"); r.code != 0 {
			t.Fatalf("redrive: %s %s", r.stdout, r.stderr)
		}
	}

	// 1. Declined: FAILED, dead-lettered, nothing posted.
	serve(failedAgain(0))
	ledger.SetFaults(corebanksim.Faults{}) // the funds arrive

	// 2. A plain reopen is refused, with the command that would help: under
	// the same key the bank replays its final answer. --same-key forces it,
	// and the bank does replay it.
	r := runCmd(ctx, env, "reopen", id, "--reason", "funds arrived")
	if want := "use: chargerecovery reopen --new-attempt --reason \"funds arrived\" " + id; r.code != exitFailed ||
		!strings.Contains(r.stderr, "was declined by the bank") || !strings.Contains(r.stderr, want) {
		t.Fatalf("plain reopen of a decline: %d %s, want exit 1 saying %q", r.code, r.stderr, want)
	}
	if rec, err := b.Store.Get(ctx, id, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Reopens != 0 {
		t.Fatalf("a refused reopen changed the record: %+v %v", rec, err)
	}
	if r := runCmd(ctx, env, "reopen", id, "--same-key", "--reason", "funds arrived"); r.code != 0 {
		t.Fatalf("reopen --same-key: %s", r.stderr)
	}
	redrive()
	serve(failedAgain(1))
	if n := len(ledger.Entries()); n != 0 {
		t.Fatalf("%d postings under the declined key", n)
	}

	// 3. --new-attempt: the next generation's key, posted once.
	r = runCmd(ctx, env, "reopen", id, "--new-attempt", "--reason", "INC-9: funds arrived")
	if r.code != 0 || !strings.Contains(r.stdout, "bank key "+id+"~2") {
		t.Fatalf("reopen --new-attempt: %d %s %s", r.code, r.stdout, r.stderr)
	}
	redrive()
	serve(func() bool {
		rec, err := b.Store.Get(ctx, id, time.Now())
		d, derr := b.Queue.Depth(ctx)
		return err == nil && rec.State == driver.StateDone && derr == nil && d.Waiting+d.InFlight == 0
	})
	posted := ledger.PostingsByKey()
	if len(posted) != 1 || posted[id+"~2"] != 1 {
		t.Fatalf("postings %v, want exactly one, under %s~2", posted, id)
	}
	rec, err := b.Store.Get(ctx, id, time.Now())
	if err != nil || rec.Generation != 2 || len(rec.History) != 2 || rec.Reopens != 2 ||
		!strings.Contains(rec.History[0], "generation 1: FAILED debit declined: INSUFFICIENT_FUNDS") ||
		!strings.Contains(rec.History[1], "generation 1: FAILED debit declined: INSUFFICIENT_FUNDS") ||
		!strings.Contains(rec.History[1], "new generation 2") || rec.Detail != ledger.Entries()[0].Reference {
		t.Fatalf("record %+v (%v), want DONE in generation 2 with both reopenings in its history", rec, err)
	}
	if r := runCmd(ctx, env, "inspect", id); r.code != 0 || !strings.Contains(r.stdout, "generation") || !strings.Contains(r.stdout, "INC-9") {
		t.Fatalf("inspect: %s %s", r.stdout, r.stderr)
	}
	if r := runCmd(ctx, env, "reopen", id, "--new-attempt", "--reason", "again"); r.code != 1 || !strings.Contains(r.stderr, "not FAILED") {
		t.Fatalf("--new-attempt on a DONE charge: %d %s", r.code, r.stderr)
	}
}

func TestRetriedDeclineOnTheEmbeddedBackend(t *testing.T) {
	t.Parallel()
	retriedDeclineScenario(t, map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "decline.db")})
}

func TestRetriedDeclineOnAWS(t *testing.T) {
	emulatorInParallel(t)
	retriedDeclineScenario(t, awsSetup(t, "decline", "--visibility", "3s"))
}
