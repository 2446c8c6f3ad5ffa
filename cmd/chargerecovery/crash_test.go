package main

import (
	"context"
	"crypto/rand"
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

	"github.com/redis/go-redis/v9"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
	"github.com/finedge/idempotent-consumer/sqlite"
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
