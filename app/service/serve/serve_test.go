package serve

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/bulk"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// options are serve's flags as parsed from args, defaults and all.
func options(t *testing.T, stderr *bytes.Buffer, args ...string) (*cli.Env, Options) {
	t.Helper()
	key := filepath.Join(t.TempDir(), "fingerprint.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--fingerprint-key-file", key}, args...)
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: stderr, Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "serve", "serve [flags]")
	var o Options
	o.Bind(f)
	if err := f.Parse(args, false); err != nil {
		t.Fatal(err)
	}
	return env, o
}

func TestRunRefusesBadOptionsBeforeOpeningAnything(t *testing.T) {
	db := filepath.Join(t.TempDir(), "never.db")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"depth interval", []string{"--depth-interval", "10ms"}, "--depth-interval 10ms is under 1s"},
		{"create-if-missing", []string{"--create-if-missing", "maybe"}, `--create-if-missing "maybe" is not true or false`},
		{"no bank", []string{"--corebank-url", ""}, "--corebank-url"},
		{"closed longer than kept", []string{"--posting-windows", "Sat 06:00-07:00 UTC", "--queue-retention", "96h"}, "a message lasts 96h0m0s on the queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"--backend", "embedded", "--db", db, "--corebank-url", "http://127.0.0.1:1", "--notify", "log", "--http-addr", ""}, tc.args...)
			env, o := options(t, &stderr, args...)
			err := Run(t.Context(), env, o, nil)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v; want a usage error naming %q", err, tc.want)
			}
		})
	}
}

// One charge on the embedded queue is debited once, and serve stops when
// its context ends.
func TestRunDebitsAChargeOnTheEmbeddedBackend(t *testing.T) {
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	bank := httptest.NewServer(corebanksim.Handler(ledger))
	defer bank.Close()
	db := filepath.Join(t.TempDir(), "serve.db")
	var stderr bytes.Buffer
	env, o := options(t, &stderr, "--backend", "embedded", "--db", db, "--corebank-url", bank.URL, "--notify", "log", "--http-addr", "127.0.0.1:0")
	b, err0 := backend.Open(t.Context(), o.Backend, 30*time.Second, true)
	if err0 != nil {
		t.Fatal(err0)
	}
	ev := bulk.Event{ID: "CHG-SERVE-1", Account: "001234567890", Minor: 2500, Currency: "INR", Type: "SMS_ALERT_FEE", Due: time.Now().UTC().Format(time.DateOnly)}
	if _, err := b.Queue.Send(t.Context(), ev.JSON(), nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, env, o, nil) }()
	var err error
wait:
	for len(ledger.Entries()) == 0 && ctx.Err() == nil {
		select {
		case err = <-done:
			break wait
		case <-time.After(20 * time.Millisecond):
		}
	}
	if cancel(); err == nil {
		err = <-done
	}
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	if n := len(ledger.Entries()); n != 1 {
		t.Fatalf("%d postings, want 1", n)
	}
	for _, want := range []string{"serving /metrics", "consumer starting", "consumer stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, stderr.String())
		}
	}
}
