package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// TestConfigKeys: every command's flags are collected (a command whose -h
// defines none would make its keys "unknown"), and one key has one
// environment variable (configKeys panics otherwise).
func TestConfigKeys(t *testing.T) {
	keys := configKeys(context.Background())
	for _, want := range []string{"queue", "db", "backend", "log-level", "operator", "corebank-url", "retention", "console-addr", "metrics-url", "addr"} {
		if keys[want] == "" {
			t.Errorf("key %s not collected", want)
		}
	}
	// reconcile's --report-file and the console's --reconcile-report-file
	// are one variable: either key sets both.
	if keys["report-file"] != "IC_RECONCILE_REPORT_FILE" || keys["reconcile-report-file"] != "IC_RECONCILE_REPORT_FILE" {
		t.Errorf("report-file → %q, reconcile-report-file → %q; want IC_RECONCILE_REPORT_FILE both", keys["report-file"], keys["reconcile-report-file"])
	}
}

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "chargerecovery.conf")
	if err := os.WriteFile(p, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFileEndToEnd: setup, send and status on the embedded backend,
// --db from the file only (through --config and through IC_CONFIG); the
// file also holds serve's and the console's keys, which these commands
// skip.
func TestConfigFileEndToEnd(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db := filepath.Join(dir, "from-config.db")
	cfg := writeConfig(t, dir, "# one file for every command\nbackend = embedded\ndb = "+db+"\nhttp-addr = 127.0.0.1:0\nconsole-addr = 127.0.0.1:0\nlog-format = text\n")
	if r := runCmd(ctx, nil, "setup", "--config", cfg); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("setup did not create the file the config names: %v", err)
	}
	env := map[string]string{"IC_CONFIG": cfg}
	if r := runCmd(ctx, env, "send", "--charge-id", "CHG-CFG-1", "--account", "001234567890", "--amount-minor", "2500"); r.code != 0 {
		t.Fatalf("send: %d %s", r.code, r.stderr)
	}
	r := runCmd(ctx, env, "status", "--json", "--metrics-url", "")
	if r.code != 0 || !strings.Contains(r.stdout, db) {
		t.Fatalf("status on the file's --db: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, `"depth":1`) && !strings.Contains(r.stdout, `"queue_depth":1`) {
		t.Logf("status: %s", r.stdout)
	}
	// the flag beats the file: another (missing) file is refused, not the file's
	other := filepath.Join(dir, "other.db")
	if r := runCmd(ctx, env, "status", "--db", other, "--metrics-url", ""); r.code == 0 || !strings.Contains(r.stderr, "other.db") {
		t.Errorf("--db over the file: %d %s", r.code, r.stderr)
	}
	// and the environment beats the file
	if r := runCmd(ctx, map[string]string{"IC_CONFIG": cfg, "IC_DB": other}, "status", "--metrics-url", ""); r.code == 0 || !strings.Contains(r.stderr, "other.db") {
		t.Errorf("IC_DB over the file: %d %s", r.code, r.stderr)
	}
}

func TestConfigFileRefusedExit2(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		args       []string
		want       []string
	}{
		{"unknown key", "backend = embedded\nqueue-ulr = x\n", []string{"status"}, []string{"chargerecovery.conf line 2", `unknown key "queue-ulr"`}},
		{"bad value", "lease = soon\n", []string{"serve"}, []string{"chargerecovery.conf line 1", `lease = "soon" is not a duration`}},
		{"a value the command checks", "backend = awz\n", []string{"status"}, []string{"--backend is from config", "chargerecovery.conf line 1"}},
		{"missing file", "", []string{"status", "--config", filepath.Join(dir, "nope.conf")}, []string{"nope.conf", "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.text != "" {
				args = append(args, "--config", writeConfig(t, t.TempDir(), tc.text))
			}
			r := runCmd(ctx, nil, args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want 2: %s", r.code, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not say %q", r.stderr, w)
				}
			}
		})
	}
}

// TestConfigExample: the example in deploy/ loads in every command (a
// key renamed or removed, or a value no longer valid, fails here, not in
// a deployment).
func TestConfigExample(t *testing.T) {
	ex := filepath.Join("..", "..", "deploy", "chargerecovery.conf.example")
	var runs []func(*cli.Env) error
	for _, c := range commands {
		argvs := [][]string{nil}
		if subs, ok := subcommands[c.Name]; ok {
			argvs = nil
			for _, s := range subs {
				argvs = append(argvs, []string{s})
			}
		}
		for _, argv := range argvs {
			runs = append(runs, func(e *cli.Env) error { return c.Run(t.Context(), e, argv) })
		}
	}
	keys := func() map[string]string { return configKeys(t.Context()) }
	if err := cli.CheckConfig(ex, keys, runs...); err != nil {
		t.Fatal(err)
	}
	if len(runs) < len(commands) {
		t.Fatal("not every command checked")
	}
}
