package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A console misconfigured exits 2 naming what to set, before it opens
// anything: no anonymous console, no token sign-in in clear on a network
// address, no proxy header trusted from everyone.
func TestConsoleRefusesABadConfiguration(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("olga operator olga-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(dir, "none.db"), "IC_CONSOLE_AUDIT_FILE": filepath.Join(dir, "audit")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no sign-in", nil, "--console-auth (IC_CONSOLE_AUTH) is required"},
		{"an unknown sign-in", []string{"--console-auth", "none"}, `--console-auth "none" is not proxy or token`},
		{"tokens without a file", []string{"--console-auth", "token"}, "needs --console-token-file"},
		{"tokens in clear on a network address", []string{"--console-auth", "token", "--console-token-file", tokens, "--console-addr", "0.0.0.0:8088"}, "would send tokens and sessions in clear"},
		{"tokens in clear on a network address, as --addr", []string{"--console-auth", "token", "--console-token-file", tokens, "--addr", "0.0.0.0:8088"}, "would send tokens and sessions in clear"},
		{"a proxy trusted from everywhere", []string{"--console-auth", "proxy", "--console-operators", "olga"}, "needs --console-trusted-proxies"},
		{"a proxy address that is none", []string{"--console-auth", "proxy", "--console-operators", "olga", "--console-trusted-proxies", "10.0.0.0/99"}, "not an address or CIDR range"},
		{"nobody may act", []string{"--console-auth", "proxy", "--console-trusted-proxies", "10.0.0.1"}, "who may act"},
		{"half of TLS", []string{"--console-auth", "token", "--console-token-file", tokens, "--console-tls-cert", "c.pem"}, "go together"},
		{"no audit file", []string{"--console-auth", "token", "--console-token-file", tokens, "--console-audit-file", ""}, "--console-audit-file (IC_CONSOLE_AUDIT_FILE) is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			if len(tc.args) > 1 && tc.args[len(tc.args)-2] == "--console-audit-file" {
				delete(env, "IC_CONSOLE_AUDIT_FILE")
				tc.args = tc.args[:len(tc.args)-2]
			}
			r := runCmd(t.Context(), env, append([]string{"console"}, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
				t.Fatal("a refused console created the SQLite file")
			}
		})
	}
}
