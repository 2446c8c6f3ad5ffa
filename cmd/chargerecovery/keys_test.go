package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// serve keys the fingerprints it writes: with a known branch prefix the
// account number cannot be recovered from a stored fingerprint, and
// inspect shows only which key wrote it and a few digits. serve without a
// key file exits 2 saying how to make one.
func TestServeWritesKeyedFingerprintsAndInspectShowsAPrefix(t *testing.T) {
	t.Parallel()
	env := map[string]string{"IC_BACKEND": "embedded", "IC_DB": filepath.Join(t.TempDir(), "keys.db")}
	ids, b, _ := sendCharges(t, env, "KEY", 3)
	serveUntil(t, env, nil, allFinished(t, b, ids))
	rec, err := b.Store.Get(t.Context(), ids[0], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.Fingerprint, "hs256:") { // a keyed fingerprint: "hs256:<key id>:<hex>"
		t.Fatalf("serve stored an unkeyed fingerprint %.12s…", rec.Fingerprint)
	}
	// sendCharges' accounts are 0098765 and five digits: try them all.
	for n := range 100_000 {
		c := charge.Charge{AccountID: fmt.Sprintf("0098765%05d", n), Amount: charge.Money{Minor: 1000, Currency: "INR"},
			Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		if c.Fingerprint(nil) == rec.Fingerprint {
			t.Fatalf("the stored fingerprint gave the account %s away", c.AccountID)
		}
	}
	r := runCmd(t.Context(), env, "inspect", ids[0], "--json")
	var shown struct{ Fingerprint string }
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || r.code != 0 {
		t.Fatalf("inspect --json: %d %v %s %s", r.code, err, r.stdout, r.stderr)
	}
	digest := rec.Fingerprint[strings.LastIndex(rec.Fingerprint, ":")+1:]
	if strings.Contains(r.stdout, digest[8:24]) || !strings.HasPrefix(rec.Fingerprint, strings.TrimSuffix(shown.Fingerprint, "…")) {
		t.Errorf("inspect shows %q of %q, want the key id and a few digits only", shown.Fingerprint, rec.Fingerprint)
	}
	text := runCmd(t.Context(), env, "inspect", ids[0])
	if strings.Contains(text.stdout, digest[8:24]) {
		t.Errorf("inspect shows the whole digest:\n%s", text.stdout)
	}

	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("tooshort"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "open.key")
	if err := os.WriteFile(open, []byte(strings.Repeat("k", 48)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"": "--fingerprint-key-file (IC_FINGERPRINT_KEY_FILE) is required", short: "want at least 32",
		open: "chmod 600 " + open} {
		e := map[string]string{"IC_FINGERPRINT_KEY_FILE": file}
		for k, v := range env {
			e[k] = v
		}
		if r := runCmd(t.Context(), e, "serve"); r.code != 2 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "tooshort") {
			t.Errorf("serve with key file %q: exit %d, %s; want 2 saying %q", file, r.code, r.stderr, want)
		}
	}
}
