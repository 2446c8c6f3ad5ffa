package console

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/cli"
)

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
