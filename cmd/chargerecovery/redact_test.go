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
)

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
