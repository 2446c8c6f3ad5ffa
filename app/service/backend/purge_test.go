package backend

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
)

func TestPurgeSaysWhatItDeletedOrWould(t *testing.T) {
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "purge", "purge [flags]")
	var o SetupOptions
	var sc SweepConfig
	o.Bind(f)
	sc.Bind(f)
	if err := f.Parse([]string{"--backend", "embedded", "--db", filepath.Join(t.TempDir(), "p.db")}, false); err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), o.Backend, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		name string
		r    PurgeRun
		want string
	}{
		{"dry run", PurgeRun{Sweep: sc, DryRun: true}, "past retention: would delete 0 idempotency record(s), 0 queue message(s), 0 DLQ message(s)\n"},
		{"deleted", PurgeRun{Sweep: sc, Now: time.Now()}, "past retention: deleted 0 idempotency record(s), 0 queue message(s), 0 DLQ message(s)\n"},
		{"json", PurgeRun{Sweep: sc, DryRun: true, JSON: true}, `{"records":0,"messages":0,"dlq_messages":0,"dry_run":true}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Purge(t.Context(), b, tc.r, &out); err != nil || out.String() != tc.want {
				t.Fatalf("Purge: %v\n got %q\nwant %q", err, out.String(), tc.want)
			}
		})
	}
	var out bytes.Buffer
	if err := Purge(t.Context(), &Backend{Store: nil, Expirer: nil}, PurgeRun{Sweep: sc}, &out); err != nil || !strings.HasPrefix(out.String(), "nothing to do") {
		t.Fatalf("Purge of a backend that expires by itself: %v, %q", err, out.String())
	}
}
