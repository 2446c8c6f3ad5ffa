package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/internal/awstest"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
)

type result struct {
	code           int
	stdout, stderr string
}

func runCmd(ctx context.Context, env map[string]string, args ...string) result {
	env = withSimNotifier(env)
	var out, errb logbuf.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := run(ctx, e, args)
	return result{code, out.String(), errb.String()}
}

// mustSetup runs setup with env (the test stops if it fails) and returns
// env.
func mustSetup(t *testing.T, env map[string]string) map[string]string {
	t.Helper()
	if r := runCmd(t.Context(), env, "setup"); r.code != 0 {
		t.Fatalf("setup: exit %d: %s", r.code, r.stderr)
	}
	return env
}

// useEmulator points the standard AWS chain (which reads the process
// environment) at the test emulator.
func useEmulator(t *testing.T) {
	t.Helper()
	awstest.Config(t) // fails in CI / skips elsewhere when unreachable
	t.Setenv("AWS_ENDPOINT_URL", os.Getenv(awstest.EndpointEnv))
	awstest.Offline(t)
}

func TestServeAgainstTheEmulatorDebitsACharge3TimesSentOnce(t *testing.T) {
	useEmulator(t)
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	name := awstest.Name("cmd")
	env := map[string]string{
		"IC_BACKEND": "aws", "IC_QUEUE": name, "IC_DLQ": name + "-dlq", "IC_TABLE": name,
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_LOG_FORMAT": "text", "IC_HTTP_ADDR": "127.0.0.1:0",
	}
	ctx := t.Context()
	if r := runCmd(ctx, env, "setup", "--visibility", "5s"); r.code != 0 {
		t.Fatalf("setup: %d %s", r.code, r.stderr)
	}
	if r := runCmd(ctx, env, "send", "--charge-id", "CHG-CMD-1", "--account", "001234567890", "--amount-minor", "2500", "--copies", "3"); r.code != 0 || strings.Count(r.stdout, "sent ") != 3 {
		t.Fatalf("send: %d %q %s", r.code, r.stdout, r.stderr)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan result, 1)
	go func() {
		done <- runCmd(sctx, env, "serve", "--visibility", "5s", "--lease", "5s", "--concurrency", "4")
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(ledger.Entries()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(7 * time.Second) // let the duplicates come back and be dropped
	stop()                      // what SIGTERM does
	r := <-done
	if r.code != 0 {
		t.Fatalf("serve exited %d: %s", r.code, r.stderr)
	}
	if got := ledger.PostingsByKey(); len(got) != 1 || got["CHG-CMD-1"] != 1 {
		t.Fatalf("ledger = %v, want one debit", got)
	}
	if !strings.Contains(r.stderr, "consumer stopped") || strings.Contains(r.stderr, "001234567890") {
		t.Fatalf("serve log: %s", r.stderr)
	}
}

func TestBadConfigurationExitsTwoWithWhatToSet(t *testing.T) {
	dir := t.TempDir()
	headers, openHeaders, secret := filepath.Join(dir, "headers"), filepath.Join(dir, "open-headers"), filepath.Join(dir, "secret")
	for f, mode := range map[string]os.FileMode{headers: 0o600, openHeaders: 0o644, secret: 0o600} {
		if err := os.WriteFile(f, []byte("X-Api-Key: s3cret-key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "usage"},
		{"unknown command", nil, []string{"frobnicate"}, "unknown command"},
		{"unknown flag", nil, []string{"serve", "--nope"}, "flag provided but not defined"},
		{"missing corebank", nil, []string{"serve"}, "--corebank-url (IC_COREBANK_URL) is required"},
		{"bad env duration", map[string]string{"IC_LEASE": "soon"}, []string{"serve"}, `IC_LEASE="soon" is not a duration`},
		{"bad backend", nil, []string{"serve", "--backend", "kafka", "--corebank-url", "http://x"}, `--backend "kafka"`},
		{"lease below visibility", nil, []string{"serve", "--corebank-url", "http://x", "--lease", "10s", "--visibility", "30s"}, "--lease 10s must be at least --visibility"},
		{"short retention", nil, []string{"serve", "--corebank-url", "http://x", "--retention", "1h"}, "--retention 1h0m0s is under 24h"},
		{"bad send", nil, []string{"send", "--charge-id", "", "--account", "1"}, "chargeId: missing or empty"},
		{"bad decline list", nil, []string{"corebank", "--decline", "nope"}, "want ACCOUNT=CODE"},
		{"malformed postgres url", nil, []string{"serve", "--corebank-url", "http://x", "--backend", "postgres", "--postgres-url", "postgres://u:pw@h/%zz"}, "--postgres-url / IC_POSTGRES_URL"},
		{"redis store without url", nil, []string{"serve", "--corebank-url", "http://x", "--store", "redis"}, "--redis-url (IC_REDIS_URL) is required"},
		{"unknown store", nil, []string{"serve", "--corebank-url", "http://x", "--store", "memcached"}, `--store "memcached"`},
		// No silent fallback to the notification simulator.
		{"no notification channel", map[string]string{"IC_NOTIFY": ""}, []string{"serve", "--corebank-url", "http://x"}, "--notify (IC_NOTIFY) is required: sns, webhook, log or sim"},
		{"unknown notification channel", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "pigeon"}, `--notify "pigeon" is not sns, webhook, log or sim`},
		{"webhook without url", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "webhook"}, "--notify webhook needs --notify-url"},
		{"webhook url with credentials", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "webhook", "--notify-url", "https://u:s3cret@h/n"}, "holds user info"},
		{"webhook url with a query secret", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "webhook", "--notify-url", "https://h/n?token=s3cret"}, "holds user info, a query"},
		{"api key to a bank over plain http", nil, []string{"serve", "--corebank-url", "http://bank.example:8081", "--notify", "log", "--corebank-header-file", headers}, "--corebank-url http://bank.example:8081 is plain http to a host on the network"},
		{"api key to a webhook over plain http", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "webhook", "--notify-url", "http://10.1.2.3/n", "--notify-header-file", headers}, "--notify-url http://10.1.2.3/n is plain http"},
		{"client secret to a token URL over plain http", nil, []string{"serve", "--corebank-url", "https://x", "--notify", "log", "--corebank-oauth-token-url", "http://idp.example/t", "--corebank-oauth-client-id", "c", "--corebank-oauth-client-secret-file", secret}, "token URL http://idp.example/t is plain http"},
		{"header file open to others", nil, []string{"serve", "--corebank-url", "https://x", "--notify", "log", "--corebank-header-file", openHeaders}, "chmod 600 " + openHeaders},
		{"sns without topic", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "sns"}, "--notify sns needs --notify-sns-topic"},
		{"webhook auth on another channel", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "log", "--notify-ca", "/etc/hosts"}, "are for --notify webhook"},
		{"client certificate without key", nil, []string{"serve", "--corebank-url", "https://x", "--notify", "log", "--corebank-client-cert", "/etc/hosts"}, "needs both the certificate and the key file"},
		{"missing CA bundle", nil, []string{"serve", "--corebank-url", "https://x", "--notify", "log", "--corebank-ca", "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"oauth without a secret file", nil, []string{"serve", "--corebank-url", "https://x", "--notify", "log", "--corebank-oauth-token-url", "https://idp/t", "--corebank-oauth-client-id", "c"}, "need the token URL, the client id and the client secret file"},
		{"sns topic not an ARN", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "sns", "--notify-sns-topic", "my-topic"}, "not a topic ARN"},
		{"unknown colocate mode", map[string]string{"IC_COLOCATE": "sometimes"}, []string{"serve", "--corebank-url", "http://x", "--notify", "log"}, `--colocate "sometimes" is not auto or off`},
		{"too many receivers", nil, []string{"serve", "--corebank-url", "http://x", "--notify", "log", "--receivers", "17"}, "--receivers 17 is outside 0-16"},
		{"bench colocate mode", nil, []string{"bench", "--colocate", "on"}, `--colocate "on" is not auto or off`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCmd(t.Context(), tt.env, tt.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tt.want)
			}
			if strings.Contains(r.stderr, "s3cret") {
				t.Fatalf("a credential was printed: %q", r.stderr)
			}
		})
	}
}

func TestNoAWSRegionSaysWhatToSet(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	r := runCmd(t.Context(), nil, "serve", "--backend", "aws", "--corebank-url", "http://127.0.0.1:1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "set AWS_REGION") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// An unreachable database or Redis is an outage, not a configuration
// error: exit 1, naming what to check.
func TestUnreachableDatabaseExitsOneWithWhatToSet(t *testing.T) {
	for _, args := range [][]string{
		{"--backend", "postgres", "--postgres-url", "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2"},
		{"--store", "redis", "--redis-url", "redis://:s3cret@127.0.0.1:1/0"},
	} {
		r := runCmd(t.Context(), nil, append([]string{"serve", "--corebank-url", "http://127.0.0.1:1", "--db", filepath.Join(t.TempDir(), "x.db")}, args...)...)
		if r.code != exitFailed || !strings.Contains(r.stderr, "_URL") || strings.Contains(r.stderr, "s3cret") {
			t.Errorf("%v: exit %d, stderr %q; want 1, the variable to set, and no password", args, r.code, r.stderr)
		}
	}
}

func TestMissingTableFailsWithWhatToCreate(t *testing.T) {
	useEmulator(t)
	name := awstest.Name("nosuch")
	r := runCmd(t.Context(), map[string]string{"IC_BACKEND": "aws", "IC_QUEUE": name, "IC_DLQ": name, "IC_TABLE": name},
		"serve", "--corebank-url", "http://127.0.0.1:1")
	if r.code != exitFailed || !strings.Contains(r.stderr, "chargerecovery setup --backend aws") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// withSimNotifier is env with IC_NOTIFY=sim unless env names IC_NOTIFY
// (even as ""): the tests' consumers notify the simulator, said out loud;
// and with the test binary's fingerprint key and an OS user (the audit
// lines' operator) unless env names them.
func withSimNotifier(env map[string]string) map[string]string {
	out := make(map[string]string, len(env)+2)
	for k, v := range env {
		out[k] = v
	}
	if _, set := env["IC_NOTIFY"]; !set {
		out["IC_NOTIFY"] = "sim"
	}
	if _, set := env["IC_FINGERPRINT_KEY_FILE"]; !set {
		out["IC_FINGERPRINT_KEY_FILE"] = testKeyFile
	}
	if _, set := env["USER"]; !set {
		out["USER"] = "test-operator"
	}
	return out
}

// The secret every case hides in a URL or a file; no piece of it may be
// printed by any command, whatever goes wrong.
const planted = "Zm9v/S3CR3T"

func leaksPlanted(out string) []string {
	var found []string
	for _, piece := range []string{planted, "S3CR3T", "Zm9v", "Zm9v%2FS3CR3T"} {
		if strings.Contains(out, piece) {
			found = append(found, piece)
		}
	}
	return found
}

// Every flag and environment variable that takes a URL or a secret file,
// with a credential in it, through the failures that print it: a URL that
// does not parse, a server that does not answer, a refused value, a normal
// start. The flag form and the environment form are both tried.
func TestNoCredentialFromAURLOrSecretFileIsPrinted(t *testing.T) {
	bank := httptest.NewServer(corebanksim.Handler(corebanksim.NewLedger(corebanksim.Faults{})))
	defer bank.Close()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	headerFile := filepath.Join(dir, "headers")
	if err := os.WriteFile(secretFile, []byte(planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(headerFile, []byte("Authorization Bearer "+planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pgUnreachable := "postgres://app:" + strings.ReplaceAll(planted, "/", "%2F") + "@127.0.0.1:1/bank?sslmode=disable"
	type tc struct {
		name, flag, env, value string
		cmd                    string
		extra                  []string
		runs                   bool // the command starts and runs until stopped
	}
	cases := []tc{
		{name: "bank URL with user info", flag: "corebank-url", env: "IC_COREBANK_URL", value: "https://svc_user:" + planted + "@127.0.0.1:1", cmd: "serve"},
		{name: "bank URL that does not parse", flag: "corebank-url", env: "IC_COREBANK_URL", value: "https://svc_user:" + planted + "@bank:port", cmd: "serve"},
		{name: "bank URL with a token in the query", flag: "corebank-url", env: "IC_COREBANK_URL", value: bank.URL + "?token=" + planted, cmd: "serve"},
		{name: "Redis URL that does not parse", flag: "redis-url", env: "IC_REDIS_URL", value: "redis://:" + planted + "@127.0.0.1:6379/0", cmd: "serve", extra: []string{"--store", "redis"}},
		{name: "Redis that does not answer", flag: "redis-url", env: "IC_REDIS_URL", value: "redis://:" + strings.ReplaceAll(planted, "/", "") + "@127.0.0.1:1/0", cmd: "status", extra: []string{"--store", "redis"}},
		{name: "PostgreSQL that does not answer", flag: "postgres-url", env: "IC_POSTGRES_URL", value: pgUnreachable, cmd: "status", extra: []string{"--backend", "postgres"}},
		{name: "PostgreSQL URL that does not parse", flag: "postgres-url", env: "IC_POSTGRES_URL", value: "postgres://app:" + planted + "@db:port/bank", cmd: "status", extra: []string{"--backend", "postgres"}},
		{name: "token URL with user info", flag: "corebank-oauth-token-url", env: "IC_COREBANK_OAUTH_TOKEN_URL", value: "https://client:" + planted + "@idp.example/token", cmd: "serve",
			extra: []string{"--corebank-oauth-client-id", "svc", "--corebank-oauth-client-secret-file", secretFile}},
		{name: "header file that does not parse", flag: "corebank-header-file", env: "IC_COREBANK_HEADER_FILE", value: headerFile, cmd: "serve"},
		{name: "consumer metrics URL with credentials", flag: "metrics-url", env: "IC_METRICS_URL", value: "http://u:" + planted + "@127.0.0.1:1/metrics?token=" + planted, cmd: "status", runs: false},
		{name: "webhook URL with a token in the query", flag: "notify-url", env: "IC_NOTIFY_URL", value: "https://127.0.0.1:1/hook?token=" + planted, cmd: "serve",
			extra: []string{"--notify", "webhook"}},
	}
	for _, c := range cases {
		for _, form := range []string{"flag", "env"} {
			t.Run(c.name+" as "+form, func(t *testing.T) {
				env := map[string]string{"IC_DB": filepath.Join(t.TempDir(), "r.db"), "IC_COREBANK_URL": bank.URL, "IC_HTTP_ADDR": "127.0.0.1:0",
					"IC_POLL_WAIT": "1s", "IC_LOG_FORMAT": "text"}
				args := append([]string{c.cmd}, c.extra...)
				if form == "flag" {
					args = append(args, "--"+c.flag, c.value)
				} else {
					env[c.env] = c.value
				}
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				if c.runs {
					ctx, cancel = context.WithTimeout(t.Context(), 3*time.Second)
				}
				defer cancel()
				r := runCmd(ctx, env, args...)
				out := r.stdout + r.stderr
				if leaked := leaksPlanted(out); len(leaked) > 0 {
					t.Errorf("%s printed %q (exit %d):\n%s", c.cmd, leaked, r.code, out)
				}
				if !c.runs && c.cmd == "serve" && r.code == 0 {
					t.Errorf("serve accepted it:\n%s", out)
				}
				if c.runs && !strings.Contains(out, "consumer starting") {
					t.Errorf("serve did not start:\n%s", out)
				}
			})
		}
	}
}

// The AWS endpoint comes from the SDK's own variable; a credential in it
// is not printed either.
func TestNoCredentialFromTheAWSEndpointIsPrinted(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "http://u:"+strings.ReplaceAll(planted, "/", "")+"@127.0.0.1:1")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r := runCmd(ctx, map[string]string{"IC_BACKEND": "aws"}, "status")
	if leaked := leaksPlanted(r.stdout + r.stderr); len(leaked) > 0 || r.code == 0 {
		t.Errorf("status printed %q (exit %d):\n%s%s", leaked, r.code, r.stdout, r.stderr)
	}
	// And it names the real cause: the endpoint does not answer — not "the
	// queue is missing, run setup".
	if !strings.Contains(r.stderr, "cannot reach AWS") || strings.Contains(r.stderr, "setup") {
		t.Errorf("an unreachable endpoint is reported as: %s", r.stderr)
	}
}

// TestAPostgreSQLErrorNamesTheServer: it used to read "[redacted]:
// connect: … user=[redacted]" for a URL with a user and no password; it
// names host:port/db and the user, and never a password.
func TestAPostgreSQLErrorNamesTheServer(t *testing.T) {
	for _, u := range []string{"postgres://postgres@127.0.0.1:1/test?sslmode=disable", "postgres://postgres:pw-Zx81q@127.0.0.1:1/test?sslmode=disable"} {
		r := runCmd(t.Context(), map[string]string{"IC_POSTGRES_URL": u}, "status", "--backend", "postgres", "--metrics-url", "")
		if r.code != exitFailed || !strings.Contains(r.stderr, "postgres at 127.0.0.1:1/test: postgres: connect") ||
			!strings.Contains(r.stderr, "user=postgres") || strings.Contains(r.stderr, "[redacted]") || strings.Contains(r.stderr, "Zx81q") {
			t.Errorf("%s: exit %d %s", u, r.code, r.stderr)
		}
	}
}

// TestARedisErrorNamesTheServer: host:port/db, the user name, never the
// password.
func TestARedisErrorNamesTheServer(t *testing.T) {
	env := map[string]string{"IC_STORE": "redis", "IC_REDIS_URL": "redis://default:pw-Zx81q@127.0.0.1:1/3", "IC_DB": filepath.Join(t.TempDir(), "r.db")}
	if r := runCmd(t.Context(), env, "setup"); r.code != exitFailed || !strings.Contains(r.stderr, "redis at 127.0.0.1:1/3:") || strings.Contains(r.stderr, "Zx81q") {
		t.Errorf("exit %d %s", r.code, r.stderr)
	}
}

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
