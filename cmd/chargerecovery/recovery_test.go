package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

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
