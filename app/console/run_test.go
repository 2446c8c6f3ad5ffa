package console

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// runOptions are console's flags as parsed from args, defaults and all,
// over an embedded backend in dir with token sign-in.
func runOptions(t *testing.T, dir string, args ...string) RunOptions {
	t.Helper()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(TokenLine("ana", Operator, "tok-ana-1234567890", "")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "console", "console [flags]")
	var o RunOptions
	o.Bind(f)
	base := []string{"--backend", "embedded", "--db", filepath.Join(dir, "c.db"), "--console-auth", "token", "--console-token-file", tokens,
		"--audit-file", filepath.Join(dir, "audit.jsonl"), "--addr", "127.0.0.1:0", "--metrics-url", ""}
	if err := f.Parse(append(base, args...), false); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRunChecksEveryOptionAndNeverCreatesTheBackend(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"retention", []string{"--retention", "1h"}, "--retention 1h0m0s is under 24h"},
		{"lease", []string{"--lease", "0s"}, "--lease must be positive"},
		{"skew", []string{"--skew-margin", "-1s"}, "--skew-margin not negative"},
		{"no audit file", []string{"--audit-file", ""}, "--audit-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(t.Context(), runOptions(t, t.TempDir(), tc.args...), new(bytes.Buffer))
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v; want a usage error naming %q", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	if err := Run(t.Context(), runOptions(t, dir), new(bytes.Buffer)); err == nil {
		t.Fatal("Run on a backend that is not there: no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "c.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Run created the database: %v", err)
	}
}

func TestRunServesUntilItsContextEnds(t *testing.T) {
	dir := t.TempDir()
	o := runOptions(t, dir)
	b, err := backend.Open(t.Context(), o.Backend, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	var log bytes.Buffer
	if err := Run(ctx, o, &log); err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if ctx.Err() == nil {
		t.Fatal("Run returned before its context ended")
	}
}

func TestNewToken(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key := audit.PublicKeyString(pub)
	for _, tc := range []struct {
		name, who, role, key string
		usage                string // "": made
	}{
		{name: "viewer", who: "ana", role: "viewer"},
		{name: "operator with a key", who: " ben ", role: "operator", key: key},
		{name: "a space in the name", who: "a b", role: "viewer", usage: "give a NAME without spaces"},
		{name: "no name", who: " ", role: "viewer", usage: "give a NAME without spaces"},
		{name: "a bad role", who: "ana", role: "admin", usage: "ROLE viewer or operator"},
		{name: "a bad key", who: "ana", role: "viewer", key: "ed25519:nope", usage: "--key: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, line, err := NewToken(tc.who, tc.role, tc.key)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("NewToken: %v; want a usage error naming %q", err, tc.usage)
				}
				return
			}
			if err != nil || len(tok) < 32 || strings.Contains(line, tok) || !strings.HasPrefix(line, strings.TrimSpace(tc.who)+" "+tc.role+" sha256:") ||
				tc.key != "" && !strings.HasSuffix(line, " "+tc.key) {
				t.Fatalf("NewToken = %q, %q, %v", tok, line, err)
			}
		})
	}
}
