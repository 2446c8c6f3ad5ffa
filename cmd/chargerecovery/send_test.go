package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/backend"
)

func TestSendFileSendsTheGoodLinesAndNamesTheBadOnes(t *testing.T) {
	for name, env := range map[string]func(t *testing.T) map[string]string{
		"embedded": func(t *testing.T) map[string]string {
			return map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "send.db")}
		},
		"postgres": pgEnv,
	} {
		t.Run(name, func(t *testing.T) {
			env := env(t)
			mustSetup(t, env)
			var lines []string
			for i := range 25 {
				lines = append(lines, fmt.Sprintf(`{"chargeId":"CHG-F-%d","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`, i))
			}
			lines[4] = `{"chargeId":"CHG-F-4","accountId":"009876543210","amount":{"minor":"2500","currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`
			lines[9] = `not json`
			path := filepath.Join(t.TempDir(), "events.ndjson")
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runCmd(t.Context(), env, "send", "--file", path)
			if r.code != exitFailed || !strings.Contains(r.stderr, "line 5: ") || !strings.Contains(r.stderr, "line 10: ") ||
				!strings.Contains(r.stdout, "sent 23 message(s) from 25 line(s)") || strings.Contains(r.stderr, "009876543210") {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			b, err := backend.Open(t.Context(), *backendFor(env), 30*time.Second, false)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			seen := map[string]bool{}
			for {
				msgs, err := b.Queue.Receive(t.Context(), 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) == 0 {
					break
				}
				for _, m := range msgs {
					c, err := charge.ParseEvent(m.Body)
					if err != nil {
						t.Fatalf("a sent message does not parse: %v", err)
					}
					seen[c.ID] = true
				}
			}
			if len(seen) != 23 || seen["CHG-F-4"] || seen["CHG-F-9"] {
				t.Fatalf("on the queue: %d charges %v", len(seen), seen)
			}
			// --raw sends what it is given, for testing the DLQ path.
			if r := runCmd(t.Context(), env, "send", "--file", path, "--raw"); r.code != 0 || !strings.Contains(r.stdout, "sent 25 message(s)") {
				t.Fatalf("--raw: exit %d %s %s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// TestSendRefusesAMissingDatabase: send --db typo.db used to create the
// file and queue the charge where no consumer looks (exit 0); now it is
// refused, as the operator commands refuse it, and setup still creates.
func TestSendRefusesAMissingDatabase(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo4.db")
	for _, args := range [][]string{
		{"send", "--db", typo, "--charge-id", "CHG-TYPO-1", "--account", "001234567890", "--amount-minor", "2500"},
		{"send", "--db", typo, "--file", os.DevNull},
	} {
		r := runCmd(t.Context(), nil, args...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "run chargerecovery setup") || !strings.Contains(r.stderr, "typo4.db") {
			t.Errorf("%v: exit %d, %s", args[:3], r.code, r.stderr)
		}
		if _, err := os.Stat(typo); !os.IsNotExist(err) {
			t.Fatalf("send created %s: %v", typo, err)
		}
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t.Context(), nil, "send", "--db", empty, "--charge-id", "CHG-TYPO-2", "--account", "001234567890", "--amount-minor", "2500"); r.code != exitFailed || !strings.Contains(r.stderr, "run chargerecovery setup") {
		t.Errorf("a file without the schema: exit %d, %s", r.code, r.stderr)
	}
	ok := filepath.Join(dir, "ok.db")
	if r := runCmd(t.Context(), nil, "setup", "--db", ok); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	if r := runCmd(t.Context(), nil, "send", "--db", ok, "--charge-id", "CHG-TYPO-3", "--account", "001234567890", "--amount-minor", "2500"); r.code != 0 {
		t.Errorf("send after setup: %d %s", r.code, r.stderr)
	}
}
