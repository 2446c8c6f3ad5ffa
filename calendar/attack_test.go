package calendar_test

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/calendar"
)

// A holidays file given by mistake (IC_HOLIDAYS pointing at the
// fingerprint key, a credentials file) must not have its content printed:
// serve writes the error to its log. The key made as the docs say
// (openssl rand -base64 48) is one line without spaces, so "the first
// field of the line" is the whole secret.
func TestAttackBadHolidaysFileDoesNotEchoASecret(t *testing.T) {
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	secret := base64.StdEncoding.EncodeToString(b)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"fingerprint.key": secret + "\n",
		"corebank.env":    "client_secret " + secret + "\n",
		"token":           "2025-01-26 Republic Day\n" + secret + "\n",
		"digits.key":      "7" + secret + "\n",
		"account":         "001234567890123456\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := calendar.ReadHolidays(path)
		if err == nil {
			t.Fatalf("%s: accepted", name)
		}
		for _, part := range []string{secret, secret[:12], "client_secret", "001234567890"} {
			if strings.Contains(err.Error(), part) {
				t.Errorf("%s: the error prints the file's content %q: %v", name, part, err)
			}
		}
		if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "YYYY-MM-DD") {
			t.Errorf("%s: the error no longer says which line and what to write: %v", name, err)
		}
	}
}
