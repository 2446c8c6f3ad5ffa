package bulk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

// defaults are send's flags as parsed from args: their defaults and all.
func defaults(t *testing.T, args ...string) SendOptions {
	t.Helper()
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "send", "send [flags]")
	var o SendOptions
	o.Bind(f)
	if err := f.Parse(args, false); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestRunSendsCopiesAndFilesToAnExistingBackendOnly(t *testing.T) {
	dir := t.TempDir()
	bc := defaults(t, "--backend", "embedded", "--db", filepath.Join(dir, "q.db")).Backend
	ev := Event{ID: "CHG-RUN-1", Account: "001234567890", Minor: 2500, Currency: "INR", Type: "SMS_ALERT_FEE", Due: "2026-01-31"}
	var none *cli.UsageError
	if err := Run(t.Context(), SendOptions{Backend: bc, Event: ev, Copies: 1}, nil, new(bytes.Buffer), new(bytes.Buffer)); err == nil || errors.As(err, &none) {
		t.Fatalf("send to a backend not set up: %v, want a failure (not a usage error)", err)
	}
	if _, err := os.Stat(bc.DB); err == nil {
		t.Fatal("send created the database")
	}
	b, err := backend.Open(t.Context(), bc, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	lines := filepath.Join(dir, "lines.ndjson")
	if err := os.WriteFile(lines, append(append(ev.JSON(), '\n'), "{not json}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := ev
	bad.Minor = -1
	for _, tc := range []struct {
		name  string
		o     SendOptions
		usage string // "": it sends
		sent  int
	}{
		{name: "three copies", o: SendOptions{Backend: bc, Event: ev, Copies: 3}, sent: 3},
		{name: "a body unchecked", o: SendOptions{Backend: bc, BodyFile: lines, Copies: 1}, sent: 1},
		{name: "too many copies", o: SendOptions{Backend: bc, Event: ev, Copies: 10001}, usage: "--copies 10001 is outside 1-10000"},
		{name: "an invalid charge", o: SendOptions{Backend: bc, Event: bad, Copies: 1}, usage: "the charge is not valid"},
		{name: "no such file", o: SendOptions{Backend: bc, File: filepath.Join(dir, "nope")}, usage: "--file:"},
		{name: "a file", o: SendOptions{Backend: bc, File: lines}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			err := Run(t.Context(), tc.o, strings.NewReader(""), &out, &errs)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("Run: %v; want a usage error naming %q", err, tc.usage)
				}
				return
			}
			if tc.o.File != "" && (err == nil || !strings.Contains(err.Error(), "1 bad line(s) were not sent")) || tc.o.File == "" && err != nil {
				t.Fatalf("Run: %v\n%s", err, errs.String())
			}
			if n := strings.Count(out.String(), "sent "); tc.o.File == "" && n != tc.sent {
				t.Fatalf("%d sent, want %d:\n%s", n, tc.sent, out.String())
			}
			if tc.o.File != "" && (!strings.Contains(errs.String(), "line 2") || strings.Contains(errs.String()+out.String(), ev.Account)) {
				t.Fatalf("a bad line not reported by number, or the account shown:\nstdout: %s\nstderr: %s", out.String(), errs.String())
			}
		})
	}
}
