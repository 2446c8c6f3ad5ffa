package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
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
