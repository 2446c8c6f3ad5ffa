package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/redis/go-redis/v9"
)

// TestMain lets the test binary run as chargerecovery in a child process
// (IC_TEST_RUN_MAIN=1), so crash tests can SIGKILL a real process.
func TestMain(m *testing.M) {
	if os.Getenv("IC_TEST_RUN_MAIN") == "1" {
		os.Exit(runProcess(&cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
			Drill: crashDrill(os.Getenv("IC_CRASH_AT"))}))
	}
	redis.SetLogger(redisLog{}) // as main does
	if spec := os.Getenv("IC_TEST_HOLD_WRITE_LOCK"); spec != "" {
		os.Exit(holdWriteLock(spec))
	}
	dir, err := os.MkdirTemp("", "chargerecovery-test-key-")
	if err != nil {
		panic(err)
	}
	testKeyFile = filepath.Join(dir, "fingerprint.key")
	if err := os.WriteFile(testKeyFile, []byte(rand.Text()+rand.Text()+"\n"), 0o600); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testKeyFile is the fingerprint key every process of this test binary
// uses (withSimNotifier puts it in their environment).
var testKeyFile string

// child starts `chargerecovery args...` as a separate process (its log on
// the test's stderr with -v).
// simBank serves ledger over HTTP for the test's duration: its URL.
func simBank(t *testing.T, ledger *corebanksim.Ledger) string {
	t.Helper()
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	t.Cleanup(bank.Close)
	return bank.URL
}

// embeddedWithBank is an embedded installation, set up, its database
// name in a folder of its own, paying through a bank that serves ledger:
// a poll wait of 1 s, an ephemeral health port, and settings on top, in
// order. It returns the environment and the database's path.
func embeddedWithBank(t *testing.T, ledger *corebanksim.Ledger, name string, settings ...map[string]string) (map[string]string, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), name)
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": db, "IC_COREBANK_URL": simBank(t, ledger), "IC_POLL_WAIT": "1s", "IC_HTTP_ADDR": "127.0.0.1:0"}
	for _, s := range settings {
		for k, v := range s {
			env[k] = v
		}
	}
	return mustSetup(t, env), db
}

func child(t *testing.T, env map[string]string, args ...string) *exec.Cmd {
	t.Helper()
	var out *os.File
	if testing.Verbose() {
		out = os.Stderr
	}
	return startChild(t, env, out, args...)
}

// childLogged starts `chargerecovery args...` as a separate process whose
// log goes to logPath.
func childLogged(t *testing.T, env map[string]string, logPath string, args ...string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return startChild(t, env, f, args...)
}

func startChild(t *testing.T, env map[string]string, out *os.File, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "IC_TEST_RUN_MAIN=1")
	for k, v := range withSimNotifier(env) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // a no-op for one that exited
	return cmd
}

// stopAll sends SIGTERM to every consumer and expects each to exit 0.
func stopAll(t *testing.T, procs ...*exec.Cmd) {
	t.Helper()
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("consumer exited with %v after SIGTERM, want 0", err)
		}
	}
}

func TestCrashWindowsEndWithOneDebitAndADoneRecord(t *testing.T) {
	tests := []struct {
		at        string
		postedAt  int // ledger entries when the process dies
		bankCalls int // debit calls in all
	}{
		{crashAfterClaim, 0, 1},
		{crashAfterDebit, 1, 2}, // the retry reaches core banking, which replays the first posting
		{crashAfterDone, 1, 1},  // DONE and the delete are one transaction: nothing to redeliver
	}
	for _, tt := range tests {
		t.Run(tt.at, func(t *testing.T) {
			ledger := corebanksim.NewLedger(corebanksim.Faults{})
			env, db := embeddedWithBank(t, ledger, "crash.db", map[string]string{"IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_LOG_FORMAT": "text"})
			if r := runCmd(t.Context(), env, "send", "--charge-id", "CHG-CRASH-1", "--account", "001234567890", "--amount-minor", "40000", "--type", "LOCKER_RENT"); r.code != 0 {
				t.Fatalf("send: %s", r.stderr)
			}

			// The first consumer dies by SIGKILL in the window.
			env["IC_CRASH_AT"] = tt.at
			proc := child(t, env, "serve")
			delete(env, "IC_CRASH_AT")
			done := make(chan error, 1)
			go func() { done <- proc.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("consumer ended with %v, want SIGKILL at %s", err, tt.at)
				}
			case <-time.After(30 * time.Second):
				_ = proc.Process.Kill()
				t.Fatal("the consumer did not reach the crash point")
			}
			if n := len(ledger.Entries()); n != tt.postedAt {
				t.Fatalf("ledger entries at the crash = %d, want %d", n, tt.postedAt)
			}
			if tt.at == crashAfterDone {
				// The embedded backend writes DONE in the transaction that
				// deletes the message: there is no window between them, and
				// nothing is left for another consumer.
				store, q := openEmbeddedForTest(t, db)
				rec, err := store.Get(t.Context(), "CHG-CRASH-1", time.Now())
				d, derr := q.Depth(t.Context())
				if err != nil || rec.State != driver.StateDone || derr != nil || d.Counts() != (queue.Depth{}) {
					t.Fatalf("after a crash right after DONE: record %+v (%v), queue %+v (%v); want DONE and an empty queue", rec, err, d, derr)
				}
				if calls := ledger.Calls("CHG-CRASH-1"); calls != tt.bankCalls {
					t.Fatalf("core-banking calls = %d, want %d", calls, tt.bankCalls)
				}
				return
			}

			// A fresh consumer finishes the job after the lease expires.
			ctx, stop := context.WithCancel(t.Context())
			served := make(chan result, 1)
			go func() { served <- runCmd(ctx, env, "serve") }()
			store, q := openEmbeddedForTest(t, db)
			deadline := time.Now().Add(30 * time.Second)
			for {
				rec, err := store.Get(t.Context(), "CHG-CRASH-1", time.Now())
				d, derr := q.Depth(t.Context())
				main := d.Waiting + d.InFlight
				if err == nil && rec.State == driver.StateDone && derr == nil && main == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not finished: record %+v (%v), queue %d", rec, err, main)
				}
				time.Sleep(50 * time.Millisecond)
			}
			stop()
			if r := <-served; r.code != 0 {
				t.Fatalf("second consumer exited %d: %s", r.code, r.stderr)
			}
			if got := ledger.PostingsByKey(); len(got) != 1 || got["CHG-CRASH-1"] != 1 {
				t.Fatalf("ledger = %v, want exactly one debit", got)
			}
			if calls := ledger.Calls("CHG-CRASH-1"); calls != tt.bankCalls {
				t.Fatalf("core-banking calls = %d, want %d", calls, tt.bankCalls)
			}
			if d, _ := q.Depth(t.Context()); d.DLQ != 0 {
				t.Fatalf("DLQ holds %d", d.DLQ)
			}
		})
	}
}

func openEmbeddedForTest(t *testing.T, path string) (*sqlite.Store, *sqlite.Queue) {
	t.Helper()
	db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q, err := sqlite.NewQueue(db, sqlite.QueueOptions{Name: "charge-due-events"})
	if err != nil {
		t.Fatal(err)
	}
	return sqlite.NewStore(db), q
}

// Several consumer processes share one SQLite file: every charge is debited
// once, whatever process handles which copy.
func TestThreeConsumerProcessesOnOneFile(t *testing.T) {
	ledger := corebanksim.NewLedger(corebanksim.Faults{Latency: 2 * time.Millisecond})
	env, db := embeddedWithBank(t, ledger, "shared.db", map[string]string{"IC_VISIBILITY": "5s", "IC_LEASE": "5s", "IC_LOG_LEVEL": "warn"})
	const n = 120
	for i := range n {
		if r := runCmd(t.Context(), env, "send", "--charge-id", "CHG-MP-"+strconv.Itoa(i), "--account", "001234567890",
			"--amount-minor", "2500", "--copies", strconv.Itoa(1+i%2)); r.code != 0 {
			t.Fatalf("send: %s", r.stderr)
		}
	}
	var procs []*exec.Cmd
	for range 3 {
		procs = append(procs, child(t, env, "serve"))
	}
	_, q := openEmbeddedForTest(t, db)
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, err := q.Depth(t.Context())
		main := d.Waiting + d.InFlight
		if err == nil && main == 0 && len(ledger.Entries()) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained: %d messages left, %d posted", main, len(ledger.Entries()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopAll(t, procs...)
	for k, c := range ledger.PostingsByKey() {
		if c != 1 {
			t.Errorf("%s posted %d times", k, c)
		}
	}
	if d := ledger.DuplicateRequests(); len(d) != 0 {
		t.Fatalf("core banking was asked again for confirmed charges: %v", d)
	}
}

// The crash drill is in the test binary only: serve has no flag or
// variable that makes a production process kill itself.
func TestServeHasNoCrashSwitch(t *testing.T) {
	r := runCmd(t.Context(), nil, "serve", "-h")
	if r.code != 0 || !strings.Contains(r.stderr+r.stdout, "corebank-url") {
		t.Fatalf("serve -h: %d %s", r.code, r.stderr)
	}
	if out := r.stderr + r.stdout; strings.Contains(out, "crash-at") || strings.Contains(out, "CRASH_AT") || strings.Contains(out, "SIGKILL") {
		t.Fatalf("serve -h offers a crash switch:\n%s", out)
	}
	if r := runCmd(t.Context(), nil, "serve", "--crash-at", "after-claim"); r.code != 2 {
		t.Fatalf("serve --crash-at: exit %d, want 2 (no such flag)", r.code)
	}
}

// Crash drills exist in the test binary only (this file): a child process
// of the tests started with IC_CRASH_AT SIGKILLs itself right after that
// step succeeds, to prove what happens in each crash window. The production
// binary has no such flag, variable or code.
const (
	crashAfterClaim = "after-claim" // claimed, nothing debited
	crashAfterDebit = "after-debit" // debited, DONE not recorded
	crashAfterDone  = "after-done"  // DONE recorded, message not acked
)

// crashDrill is the cli.Env.Drill of a child started with IC_CRASH_AT=at
// (nil when at is empty); an unknown point is a bug in the test.
func crashDrill(at string) func(queue.Queue, driver.Store, charge.Debiter) (queue.Queue, driver.Store, charge.Debiter) {
	switch at {
	case "":
		return nil
	case crashAfterClaim, crashAfterDebit, crashAfterDone:
		return func(q queue.Queue, s driver.Store, d charge.Debiter) (queue.Queue, driver.Store, charge.Debiter) {
			return crashingQueue{q, s, at}, crashingStore{s, at}, crashingDebiter{d, at}
		}
	}
	panic("IC_CRASH_AT=" + at + " is not after-claim, after-debit or after-done")
}

func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}

type crashingStore struct {
	driver.Store
	at string
}

func (s crashingStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, req)
	if err == nil && res.Acquired && s.at == crashAfterClaim {
		die()
	}
	return res, err
}

func (s crashingStore) Finish(ctx context.Context, f driver.FinishRequest) error {
	err := s.Store.Finish(ctx, f)
	if err == nil && s.at == crashAfterDone {
		die()
	}
	return err
}

// crashingQueue carries the drill onto claims that ride in the queue's
// transactions (a backend whose queue and store share a database): it dies
// right after a receive that acquired a claim, or right after a result was
// written with its message's delete.
type crashingQueue struct {
	queue.Queue
	store driver.Store
	at    string
}

func (q crashingQueue) Holds(s driver.Store) bool {
	cr, ok := q.Queue.(queue.ClaimingReceiver)
	if cs, wrapped := s.(crashingStore); wrapped {
		s = cs.Store
	}
	return ok && cr.Holds(s)
}

func (q crashingQueue) ReceiveClaiming(ctx context.Context, max int, p queue.ClaimPolicy) ([]queue.Message, error) {
	msgs, err := q.Queue.(queue.ClaimingReceiver).ReceiveClaiming(ctx, max, p)
	for i, m := range msgs {
		if m.Bound == nil {
			continue
		}
		// Look at the claim (taking it) and hand it on to the Guard.
		req, res, ok := m.Bound.Claimed()
		if ok && res.Acquired && q.at == crashAfterClaim {
			die()
		}
		cb := &crashingBound{Bound: m.Bound, at: q.at}
		if ok {
			cb.claim = driver.NewClaimedAtReceive(q.store, req, res)
		} else {
			cb.claim = driver.NewClaimedAtReceive(q.store, driver.ClaimRequest{}, driver.ClaimResult{})
			cb.claim.Claimed() // none to hand on
		}
		msgs[i].Bound = cb
	}
	return msgs, err
}

// crashingBound dies right after a result's write (with the message's
// delete) succeeded. The receive above took the inner claim to look at it:
// it hands the claim on (and gives it up) itself.
type crashingBound struct {
	driver.Bound
	claim *driver.ClaimedAtReceive
	at    string
}

func (b *crashingBound) Claimed() (driver.ClaimRequest, driver.ClaimResult, bool) {
	return b.claim.Claimed()
}

func (b *crashingBound) Release(ctx context.Context) error { return b.claim.Release(ctx) }

func (b *crashingBound) Finish(ctx context.Context, f driver.FinishRequest) error {
	err := b.Bound.Finish(ctx, f)
	if err == nil && b.at == crashAfterDone {
		die()
	}
	return err
}

type crashingDebiter struct {
	charge.Debiter
	at string
}

func (d crashingDebiter) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	r, err := d.Debiter.Debit(ctx, req)
	if err == nil && d.at == crashAfterDebit {
		die()
	}
	return r, err
}

// The recovery policy on real processes over the embedded backend: a
// consumer killed (SIGKILL) while a charge waits — for its retry, for its
// notice's lead — loses nothing, and the charge ends with one debit.
func TestRecoveryPolicySurvivesAKillInEveryWait(t *testing.T) {
	for _, tt := range []struct {
		name      string
		flags     map[string]string
		account   string
		waitFor   charge.Status // the wait the consumer is killed in
		bankKey   string        // the posting's key
		generaton int
		history   []string // what the history's lines say, in order
	}{
		{"retry", map[string]string{"IC_RETRY_DECLINES": "INSUFFICIENT_FUNDS=2s×3"}, "001111111111", charge.RetryScheduled,
			"CHG-PROC~3", 3, []string{"generation 1: declined INSUFFICIENT_FUNDS", "generation 2: declined INSUFFICIENT_FUNDS", "generation 3: debited"}},
		{"notice-first", map[string]string{"IC_NOTICE_LEAD": "3s"}, "001234567890", charge.NoticeSent,
			"CHG-PROC", 1, []string{"notice CHG-PROC:advance-notice sent", "generation 1: debited"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ledger := corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{"001111111111": "INSUFFICIENT_FUNDS*2"}})
			env, db := embeddedWithBank(t, ledger, "recovery.db", map[string]string{"IC_VISIBILITY": "3s", "IC_LEASE": "3s", "IC_LOG_FORMAT": "text"}, tt.flags)
			if r := runCmd(t.Context(), env, "send", "--charge-id", "CHG-PROC", "--account", tt.account, "--amount-minor", "2500", "--type", "SMS_ALERT_FEE"); r.code != 0 {
				t.Fatalf("send: %s", r.stderr)
			}
			store, q := openEmbeddedForTest(t, db)
			record := func() driver.Record {
				r, _ := store.Get(t.Context(), "CHG-PROC", time.Now())
				return r
			}

			// The first consumer is killed as soon as the charge waits.
			first := child(t, env, "serve")
			deadline := time.Now().Add(30 * time.Second)
			for r := record(); r.State != driver.StateWaiting || r.Status != string(tt.waitFor); r = record() {
				if time.Now().After(deadline) {
					t.Fatalf("the charge never waited for %s: %+v", tt.waitFor, r)
				}
				time.Sleep(20 * time.Millisecond)
			}
			_ = first.Process.Signal(syscall.SIGKILL)
			var ee *exec.ExitError
			if err := first.Wait(); !errors.As(err, &ee) {
				t.Fatalf("the first consumer ended with %v, want killed", err)
			}
			waiting := record()
			if d, err := q.Depth(t.Context()); err != nil || d.Waiting+d.InFlight != 1 {
				t.Fatalf("after the kill the queue holds %+v (%v), want the charge's message", d, err)
			}
			if tt.waitFor == charge.NoticeSent && len(ledger.Entries()) != 0 {
				t.Fatalf("debited before the notice's lead: %v", ledger.Entries())
			}

			// A new consumer finishes it.
			ctx, stop := context.WithCancel(t.Context())
			served := make(chan result, 1)
			go func() { served <- runCmd(ctx, env, "serve") }()
			deadline = time.Now().Add(60 * time.Second)
			for r := record(); r.State != driver.StateDone; r = record() {
				if time.Now().After(deadline) {
					t.Fatalf("not finished after the restart: %+v", r)
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond) // anything left to go wrong, let it
			stop()
			if r := <-served; r.code != 0 {
				t.Fatalf("second consumer exited %d: %s", r.code, r.stderr)
			}
			if got := ledger.PostingsByKey(); len(got) != 1 || got[tt.bankKey] != 1 {
				t.Fatalf("ledger %v, want one posting under %s", got, tt.bankKey)
			}
			if dup := ledger.DuplicateRequests(); len(dup) != 0 {
				t.Fatalf("requests after the bank confirmed: %v", dup)
			}
			if d, err := q.Depth(t.Context()); err != nil || d.Counts() != (queue.Depth{}) {
				t.Fatalf("queue %+v (%v), want empty (no DLQ entry either)", d, err)
			}
			if tt.waitFor == charge.NoticeSent {
				posted := ledger.Entries()[0].PostedAt
				if posted.Before(waiting.LeaseUntil) {
					t.Fatalf("posted at %v, before the notice's time %v", posted, waiting.LeaseUntil)
				}
			}
			// inspect --json is what an operator reads.
			r := runCmd(t.Context(), env, "inspect", "--json", "CHG-PROC")
			var rec status.RecordJSON
			if err := json.Unmarshal([]byte(r.stdout), &rec); r.code != 0 || err != nil {
				t.Fatalf("inspect: exit %d, %v: %s%s", r.code, err, r.stdout, r.stderr)
			}
			if rec.State != "DONE" || rec.Generation != tt.generaton || len(rec.History) != len(tt.history) {
				t.Fatalf("inspect: %+v, want DONE under generation %d with %d history lines", rec, tt.generaton, len(tt.history))
			}
			for i, want := range tt.history {
				if !strings.HasPrefix(rec.History[i], want) {
					t.Errorf("history line %d = %q, want it to start %q", i+1, rec.History[i], want)
				}
			}
		})
	}
}

// Outside the posting window serve receives nothing — the charge is not
// debited and its message not even received — and says so on /readyz
// (200), in status, and on /metrics.
func TestServeOutsideThePostingWindowPostsNothingAndSaysUntilWhen(t *testing.T) {
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	addr := freeAddr(t)
	env, _ := embeddedWithBank(t, ledger, "window.db", map[string]string{"IC_LOG_FORMAT": "text", "IC_HTTP_ADDR": addr, "IC_POSTING_WINDOWS": closedNow(time.Now().UTC())})
	if r := runCmd(t.Context(), env, "send", "--charge-id", "CHG-WINDOW", "--account", "001234567890", "--amount-minor", "2500"); r.code != 0 {
		t.Fatalf("send: %s", r.stderr)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan result, 1)
	go func() { served <- runCmd(ctx, env, "serve") }()
	base := "http://" + addr
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, b := getBody(base + "/readyz"); code == 200 {
			body = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve's /readyz never answered 200")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(body, "ready; outside posting window until ") || !strings.Contains(body, "UTC") {
		t.Errorf("/readyz = %q, want ready, outside the posting window until when", body)
	}
	time.Sleep(2 * time.Second) // a few polls' worth: nothing may be received
	_, metrics := httpGet(t, base+"/metrics")
	if v := metricValue(t, metrics, "chargerecovery_posting_window_open"); v != 0 {
		t.Errorf("posting_window_open = %v, want 0", v)
	}
	if v := metricValue(t, metrics, "chargerecovery_messages_received_total"); v != 0 {
		t.Errorf("messages received outside the window: %v", v)
	}
	r := runCmd(t.Context(), env, "status", "--metrics-url", base+"/metrics")
	if r.code != 0 || !strings.Contains(r.stdout, "outside posting window until ") || !strings.Contains(r.stdout, "1 waiting, 0 in flight") {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	stop()
	if r := <-served; r.code != 0 {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
	if n := len(ledger.Entries()); n != 0 || ledger.Calls("CHG-WINDOW") != 0 {
		t.Fatalf("debited outside the window: %v", ledger.Entries())
	}
}

// closedNow is a posting calendar of every day, closed for the two hours
// around now (UTC): closed now, and never for longer than the queue keeps
// a message (serve refuses a longer closure).
func closedNow(now time.Time) string {
	hhmm := func(t time.Time) string { return t.Format("15:04") }
	closes, opens := now.Add(-time.Hour).Truncate(time.Minute), now.Add(time.Hour).Truncate(time.Minute)
	if closes.YearDay() != opens.YearDay() { // the closure spans midnight: one window between
		return "Mon-Sun " + hhmm(opens) + "-" + hhmm(closes) + " UTC"
	}
	spec := "Mon-Sun " + hhmm(opens) + "-23:59 UTC"
	if hhmm(closes) != "00:00" {
		spec = "Mon-Sun 00:00-" + hhmm(closes) + " UTC; " + spec
	}
	return spec
}

// A bad recovery-policy flag exits 2 naming what to fix.
func TestBadRecoveryPolicyFlagsSayWhatToFix(t *testing.T) {
	for _, tt := range []struct{ env, value, want string }{
		{"IC_RETRY_DECLINES", "INSUFFICIENT_FUNDS=24h", "INSUFFICIENT_FUNDS=24h"},
		{"IC_RETRY_DECLINES", "ACCOUNT_CLOSED=24h×3", "hard decline"},
		{"IC_POSTING_WINDOWS", "Mon-Fri 06:00-20:00 Mars/Olympus", "Mars/Olympus"},
		{"IC_POSTING_WINDOWS", "Mon-Fri 22:00-02:00 UTC", "midnight"},
		{"IC_HOLIDAYS", "/nonexistent/holidays.txt", "--posting-windows"},
		{"IC_NOTICE_LEAD", "-1h", "--notice-lead"},
	} {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "x.db"), "IC_COREBANK_URL": "http://127.0.0.1:1",
				tt.env: tt.value}
			r := runCmd(t.Context(), env, "serve")
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("serve with %s=%q: exit %d, stderr:\n%s\nwant exit 2 naming %q", tt.env, tt.value, r.code, r.stderr, tt.want)
			}
		})
	}
}
