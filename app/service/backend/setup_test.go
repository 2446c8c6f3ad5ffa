package backend

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func TestSetupChecksThenCreatesTheEmbeddedBackend(t *testing.T) {
	dir := t.TempDir()
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	parse := func(args ...string) SetupOptions {
		f := cli.NewFlagSet(env, "setup", "setup [flags]")
		var o SetupOptions
		o.Bind(f)
		if err := f.Parse(append([]string{"--backend", "embedded", "--db", filepath.Join(dir, "s.db")}, args...), false); err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name  string
		args  []string
		usage string // "": it sets up
	}{
		{"visibility under 1s", []string{"--visibility", "500ms"}, "--visibility 500ms is outside 1s-12h"},
		{"visibility over 12h", []string{"--visibility", "13h"}, "is outside 1s-12h"},
		{"a topic SNS refuses", []string{"--notify", "sns", "--notify-sns-topic", "no spaces"}, `--notify-sns-topic "no spaces": a topic name`},
		{"a FIFO topic with nothing before .fifo", []string{"--notify", " sns ", "--notify-sns-topic", ".fifo"}, "a topic name"},
		{"a bad name, no topic asked for", []string{"--notify", "log", "--notify-sns-topic", "no spaces"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Setup(t.Context(), parse(tc.args...), &out)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("Setup: %v; want a usage error naming %q", err, tc.usage)
				}
				if _, err := os.Stat(filepath.Join(dir, "s.db")); err == nil {
					t.Fatal("a refused setup created the database")
				}
				return
			}
			if err != nil || !strings.HasPrefix(out.String(), "ready: ") || strings.Contains(out.String(), "sns topic") {
				t.Fatalf("Setup: %v\n%s", err, out.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "s.db")); err != nil {
				t.Fatalf("no database after setup: %v", err)
			}
		})
	}
}
