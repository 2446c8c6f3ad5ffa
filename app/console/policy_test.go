package console_test

import (
	"bytes"
	"crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
)

// ChangePolicy is approvals policy POLICY: checked, then kept in the
// backend under the console's key, audited, its heads logged.
func TestChangePolicyKeepsWhatTheConsoleWould(t *testing.T) {
	dir := t.TempDir()
	pem, err := audit.PrivateKeyPEM(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "console.key")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	trail := filepath.Join(dir, "audit.jsonl")
	cfg := backend.Config{Kind: backend.Embedded, DB: filepath.Join(dir, "ic.db"), Queue: "charges"}
	open := func() (*backend.Backend, error) { return backend.Open(t.Context(), cfg, 0, true) }
	ok := console.Config{KeyFile: keyFile, AuditFile: trail, Auth: "proxy"}
	for _, tc := range []struct {
		name, policy, why string
		c                 console.Config
		usage             string // "": kept
	}{
		{name: "kept", policy: "bulk>5", why: "INC-1", c: ok},
		{name: "not a policy", policy: "sometimes", why: "INC-1", c: ok, usage: "sometimes"},
		{name: "no reason", policy: "bulk>5", why: " ", c: ok, usage: "--reason is required"},
		{name: "no sign-in", policy: "bulk>5", why: "INC-1", c: console.Config{KeyFile: keyFile, AuditFile: trail}, usage: "--console-auth token|proxy"},
		{name: "token sign-in without its file", policy: "bulk>5", why: "INC-1", c: console.Config{KeyFile: keyFile, AuditFile: trail, Auth: "token"}, usage: "--console-token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var heads bytes.Buffer
			opened := false
			p, err := tc.c.ChangePolicy(t.Context(), tc.policy, tc.why, func() (*backend.Backend, error) { opened = true; return open() }, &heads, slog.New(slog.DiscardHandler))
			if tc.usage != "" {
				if err == nil || !strings.Contains(err.Error(), tc.usage) || opened {
					t.Fatalf("err = %v (backend opened %v), want %q before the backend opens", err, opened, tc.usage)
				}
				return
			}
			if err != nil || p.String() != tc.policy || !strings.Contains(heads.String(), `"audit head"`) {
				t.Fatalf("policy %s, %v; heads %q", p, err, heads.String())
			}
			b, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ks, err := approval.OpenKept(b.Store, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s, kept, err := ks.Load(t.Context(), nil); err != nil || !kept || s.Policy != tc.policy || s.Trail != trail || s.Why != tc.why {
				t.Fatalf("kept %+v %v %v", s, kept, err)
			}
		})
	}
}
