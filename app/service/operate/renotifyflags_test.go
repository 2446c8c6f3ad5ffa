package operate

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// plainStore is a store that can neither amend nor list results.
type plainStore struct{ driver.Store }

func TestRenotifyFlags(t *testing.T) {
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "renotify", "renotify")
	var ok RenotifyFlags
	ok.Bind(f)
	if err := f.Parse([]string{"--dry-run", "--limit", "10", "--retention", "1h", "--skew-margin", "1s"}, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(r *RenotifyFlags)
		ids   []string
		usage string // "": checked
	}{
		{"ids", func(*RenotifyFlags) {}, []string{"A"}, ""},
		{"all", func(r *RenotifyFlags) { r.All = true }, nil, ""},
		{"both", func(r *RenotifyFlags) { r.All = true }, []string{"A"}, "give CHARGE_IDs or --all, not both"},
		{"neither", func(*RenotifyFlags) {}, nil, "give the CHARGE_IDs to notify again, or --all"},
		{"limit", func(r *RenotifyFlags) { r.Limit = 0 }, []string{"A"}, "--limit and --notify-timeout must be positive"},
		{"short lease", func(r *RenotifyFlags) { r.Lease = 9 * time.Second }, []string{"A"}, "--lease 9s must be at least twice --notify-timeout 5s"},
		{"retention", func(r *RenotifyFlags) { r.Retention = 0 }, []string{"A"}, "--retention must be positive"},
		{"skew", func(r *RenotifyFlags) { r.Skew = time.Minute }, []string{"A"}, "--skew-margin 1m0s must be at least 0 and shorter than --lease 1m0s"},
		{"no channel to send on", func(r *RenotifyFlags) { r.DryRun = false }, []string{"A"}, "--notify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Check(tc.ids)
			var ue *cli.UsageError
			if tc.usage == "" && err != nil || tc.usage != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage)) {
				t.Fatalf("Check: %v; want %q", err, tc.usage)
			}
		})
	}
	if got := ok.Proposal([]string{"A", "B"}); got != `renotify --reason "…why…" --charge-id A,B` {
		t.Errorf("Proposal = %s", got)
	}
	store := memstore.New()
	if _, err := ok.Pending(t.Context(), plainStore{store}, "dynamodb", []string{"A"}, time.Now()); err == nil || err.Error() != "the dynamodb store cannot amend or list results" {
		t.Fatalf("Pending on a store without the capabilities: %v", err)
	}
	if _, err := ok.Pending(t.Context(), store, "memory", []string{"A"}, time.Now()); err != nil {
		t.Fatalf("Pending on the memory store: %v", err)
	}
	if rn, err := ok.Renotifier(t.Context(), store, nil); err != nil || rn == nil {
		t.Fatalf("a dry run's Renotifier: %v", err)
	}
}
