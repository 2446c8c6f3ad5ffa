package calendar_test

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/calendar"
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

// Etc/GMT+5 parses, and is five hours behind UTC, not ahead (the POSIX
// sign, inverted): "Mon-Fri 06:00-20:00 Etc/GMT+5" written for a bank at
// UTC+5 posts from 11:00 to 01:00 UTC instead of 01:00 to 15:00 — ten
// hours off, debits at the bank's 16:00-06:00. And EST is New York
// without its summer time, an hour off for half the year. Such zones must
// be refused, naming the zone to use.
func TestAttackZonesThatMeanSomethingElseAreRefused(t *testing.T) {
	for _, zone := range []string{"Etc/GMT+5", "Etc/GMT-5", "EST", "MST", "HST"} {
		_, err := calendar.ParseWindows("Mon-Fri 06:00-20:00 " + zone)
		if err == nil {
			t.Errorf("%s: accepted", zone)
		}
	}
	for _, zone := range []string{"UTC", "Etc/UTC", "Asia/Kolkata", "America/New_York", "EST5EDT", "Etc/GMT"} {
		if _, err := calendar.ParseWindows("Mon-Fri 06:00-20:00 " + zone); err != nil {
			t.Errorf("%s: %v", zone, err)
		}
	}
}
