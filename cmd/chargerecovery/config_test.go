package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// serveBriefly runs serve with extra flags for at most d: a configuration
// serve refuses ends it at once (exit 2), one it accepts runs until d has
// passed (exit 0).
func serveBriefly(t *testing.T, d time.Duration, args ...string) result {
	t.Helper()
	env := map[string]string{
		"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "cal.db"), "IC_COREBANK_URL": "http://127.0.0.1:1",
		"IC_POLL_WAIT": "1s", "IC_LOG_FORMAT": "text", "IC_HTTP_ADDR": "127.0.0.1:0",
	}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return runCmd(ctx, env, append([]string{"serve"}, args...)...)
}

// A calendar that never opens (a holidays file that lists every day: a
// calendar of working days given as the holidays, say) is a consumer that
// runs, answers ready, and posts nothing, ever; serve must refuse it and
// say why.
func TestAttackServeRefusesACalendarThatNeverOpens(t *testing.T) {
	var b strings.Builder
	for d := time.Now().UTC().AddDate(0, 0, -2); d.Before(time.Now().AddDate(2, 0, 0)); d = d.AddDate(0, 0, 1) {
		fmt.Fprintf(&b, "%s working day\n", d.Format(time.DateOnly))
	}
	holidays := filepath.Join(t.TempDir(), "holidays.txt")
	if err := os.WriteFile(holidays, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r := serveBriefly(t, 5*time.Second, "--posting-windows", "Mon-Fri 06:00-20:00 Asia/Kolkata", "--holidays", holidays)
	if r.code != 2 || !strings.Contains(r.stderr, "no posting window opens") {
		t.Fatalf("serve with a calendar that never opens: exit %d, want 2 saying no window opens\n%s", r.code, r.stderr)
	}
}

// Outside the window nothing is received, so a message waits on the queue
// for the whole closed stretch; the queue deletes it once its retention
// has passed (SQS's MessageRetentionPeriod; the embedded sweeper). A
// calendar closed for longer than that (one window a week, or a weekend
// joined to holidays on either side) loses every charge sent as it closes:
// never debited, never dead-lettered. serve must refuse it, naming the
// stretch and the retention.
func TestAttackServeRefusesAClosedStretchLongerThanTheQueueRetention(t *testing.T) {
	// Saturday mornings only: closed 6 days 17 hours a week, against the
	// embedded queue's default retention of 96h.
	r := serveBriefly(t, 5*time.Second, "--posting-windows", "Sat 06:00-13:00 Asia/Kolkata")
	if r.code != 2 || !strings.Contains(r.stderr, "retention") || !strings.Contains(r.stderr, "Sat") {
		t.Fatalf("serve with a week-long closed stretch and a 96h queue retention: exit %d, want 2 naming the stretch and the retention\n%s", r.code, r.stderr)
	}
	// Holidays on the Friday and the Monday around a weekend: 4 days 10
	// hours closed.
	var fri time.Time
	for fri = time.Now().AddDate(0, 1, 0); fri.Weekday() != time.Friday; fri = fri.AddDate(0, 0, 1) {
	}
	holidays := filepath.Join(t.TempDir(), "holidays.txt")
	file := fri.Format(time.DateOnly) + " bridge day\n" + fri.AddDate(0, 0, 3).Format(time.DateOnly) + " festival\n"
	if err := os.WriteFile(holidays, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	r = serveBriefly(t, 5*time.Second, "--posting-windows", "Mon-Fri 06:00-20:00 Asia/Kolkata", "--holidays", holidays)
	if r.code != 2 || !strings.Contains(r.stderr, "retention") {
		t.Fatalf("serve with a 4d10h closed stretch and a 96h queue retention: exit %d, want 2\n%s", r.code, r.stderr)
	}
	// A weekend after one Friday holiday, 3 days 10 hours, fits in 96h
	// with the 12 hours a waiting charge's copy may already be old.
	if err := os.WriteFile(holidays, []byte(fri.Format(time.DateOnly)+" bridge day\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = serveBriefly(t, 3*time.Second, "--posting-windows", "Mon-Fri 06:00-20:00 Asia/Kolkata", "--holidays", holidays)
	if r.code != 0 {
		t.Fatalf("serve with a 3d10h closed stretch and a 96h queue retention: exit %d, want it to run\n%s", r.code, r.stderr)
	}
	if err := os.WriteFile(holidays, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same with a queue that keeps messages a week starts.
	r = serveBriefly(t, 3*time.Second, "--posting-windows", "Mon-Fri 06:00-20:00 Asia/Kolkata", "--holidays", holidays, "--queue-retention", "168h")
	if r.code != 0 {
		t.Fatalf("serve with a 4d10h closed stretch and a 168h queue retention: exit %d, want it to run\n%s", r.code, r.stderr)
	}
}

// Last year's holidays file (the year rolled over, the file did not) is
// read, valid, and closes nothing any more: serve posts on every holiday
// of the new year without a word. It must at least warn at start, and say
// what calendar it runs by.
func TestAttackServeWarnsOfAHolidaysFileWithNoDateAhead(t *testing.T) {
	holidays := filepath.Join(t.TempDir(), "holidays.txt")
	last := time.Now().AddDate(-1, 0, 0).Year()
	file := fmt.Sprintf("%d-01-26 Republic Day\n%d-08-15 Independence Day\n%d-10-02 Gandhi Jayanti\n", last, last, last)
	if err := os.WriteFile(holidays, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	r := serveBriefly(t, 3*time.Second, "--posting-windows", "Mon-Fri 06:00-20:00 Asia/Kolkata", "--holidays", holidays)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var warned bool
	for _, line := range strings.Split(r.stderr, "\n") {
		warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, "holidays") && strings.Contains(line, fmt.Sprintf("%d-10-02", last))
	}
	if !warned || !strings.Contains(r.stderr, "Mon-Fri 06:00-20:00 Asia/Kolkata") {
		t.Fatalf("serve with a holidays file whose last date (%d-10-02) has passed: no warning naming it, or no word of the calendar\n%s", last, r.stderr)
	}
}

// nextWeekday is the first date after from (at least a week on) that
// falls on day.
func nextWeekday(from time.Time, day time.Weekday) time.Time {
	d := from.AddDate(0, 0, 7)
	for d.Weekday() != day {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

// Posting windows Mon-Fri 06:00-20:00 and a Monday and Tuesday holiday
// (India: a festival next to a weekend is common) close the calendar from
// Friday 20:00 to Wednesday 06:00: 4 days 10 hours. The calendar's gate
// receives nothing meanwhile, by design, and the queue's message retention
// is 4 days (the default of the SQL queues and of SQS): every charge that
// arrives as the window closes is deleted by the queue's retention before
// it opens — never received, no record, nothing in the DLQ, nothing to
// alert on. serve started with that calendar as if nothing were wrong.
func TestAttackPostingWindowsClosedLongerThanTheQueueRetentionStart(t *testing.T) {
	dir := t.TempDir()
	monday := nextWeekday(time.Now().UTC(), time.Monday)
	holidays := filepath.Join(dir, "holidays")
	if err := os.WriteFile(holidays, fmt.Appendf(nil, "%s festival\n%s festival\n",
		monday.Format(time.DateOnly), monday.AddDate(0, 0, 1).Format(time.DateOnly)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "x.db"), "IC_HTTP_ADDR": "127.0.0.1:0"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := runCmd(ctx, env, "serve", "--corebank-url", "http://127.0.0.1:1", "--notify", "log",
		"--posting-windows", "Mon-Fri 06:00-20:00 UTC", "--holidays", holidays)
	if r.code != exitUsage || !strings.Contains(r.stderr, "retention") {
		t.Fatalf("serve with a calendar closed 4 days 10 hours over a 4-day message retention: exit %d; want it refused (2) saying the queue's retention is shorter than the closure; stderr: %s",
			r.code, lastLines(r.stderr, 5))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Every IC_* variable the Kubernetes ConfigMap sets is one serve reads
// (a misspelt variable would be ignored silently: serve would run on its
// default).
func TestTheKubernetesConfigSetsOnlyServesVariables(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/k8s/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, data, ok := strings.Cut(string(raw), "\ndata:\n")
	if !ok {
		t.Fatal("config.yaml has no data:")
	}
	r := runCmd(t.Context(), map[string]string{}, "serve", "-h")
	help := r.stdout + r.stderr
	if !strings.Contains(help, "[IC_BACKEND]") {
		t.Fatalf("serve -h names no variables: %s", help)
	}
	n := 0
	for _, line := range strings.Split(data, "\n") {
		key, _, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(key, "IC_") {
			continue
		}
		n++
		if !strings.Contains(help, "["+key+"]") {
			t.Errorf("deploy/k8s/config.yaml sets %s, which serve does not read", key)
		}
	}
	if n < 10 {
		t.Fatalf("read only %d IC_ variables from config.yaml", n)
	}
}
