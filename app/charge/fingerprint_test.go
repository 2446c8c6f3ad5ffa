package charge_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, idempotency.MinFingerprintKey) }

func fingerprinter(t *testing.T, current []byte, previous ...[]byte) *idempotency.Fingerprinter {
	t.Helper()
	f, err := idempotency.NewFingerprinter(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// service is a Service over f's store, ledger and clock, with its own keys.
func (f *fixture) service(t *testing.T, keys *idempotency.Fingerprinter) *charge.Service {
	t.Helper()
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, FinishTimeout: time.Second, Fingerprints: keys})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// With a branch prefix known, an unkeyed fingerprint gives the account
// number away by trying every suffix; a keyed one does not, without the
// key. The record holds only the keyed one.
func TestAKeyedFingerprintDoesNotGiveTheAccountAway(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-FP-1")
	c.AccountID = "0012340" + "56789"
	wantOutcome(t, f.service(t, fingerprinter(t, key(1))).Process(t.Context(), c, nil), charge.Processed)
	stored := f.record(t, c.ID).Fingerprint
	guess := func(fp string) (string, bool) {
		for n := range 100_000 {
			g := c
			g.AccountID = fmt.Sprintf("0012340%05d", n)
			if g.Fingerprint(nil) == fp {
				return g.AccountID, true
			}
		}
		return "", false
	}
	if acct, found := guess(c.Fingerprint(nil)); !found || acct != c.AccountID {
		t.Fatalf("the guessing does not work on an unkeyed fingerprint (%q): the test proves nothing", acct)
	}
	if acct, found := guess(stored); found {
		t.Errorf("the stored fingerprint %.16s… gave the account %s away", stored, acct)
	}
	if prefix := "hs256:" + fingerprinter(t, key(1)).KeyID() + ":"; !strings.HasPrefix(stored, prefix) {
		t.Errorf("stored fingerprint %.16s… does not name its key (want it to begin %s)", stored, prefix)
	}
}

// A key rotation turns no duplicate into a conflict and no conflict into a
// duplicate: a record written under the previous key (or under none, before
// keys) is compared under the key that wrote it — DONE stays a duplicate,
// an expired claim is reclaimed and debited once, another payload is still
// a conflict; a key not held is a conflict that says so, never a debit.
func TestRotatingTheFingerprintKeyKeepsDuplicatesDuplicates(t *testing.T) {
	oldKey, newKey := key(1), key(2)
	before := fingerprinter(t, oldKey)
	during := fingerprinter(t, newKey, oldKey)
	after := fingerprinter(t, newKey)
	for _, tc := range []struct {
		name    string
		written *idempotency.Fingerprinter // nil: unkeyed, before keys
		reader  *idempotency.Fingerprinter
		other   bool // the redelivery carries another payload
		crashed bool // the first worker died holding the claim
		want    charge.Outcome
		debits  int
	}{
		{name: "DONE under the previous key", written: before, reader: during, want: charge.DuplicateDone, debits: 1},
		{name: "DONE before keys", written: nil, reader: during, want: charge.DuplicateDone, debits: 1},
		{name: "a claim under the previous key whose worker died", written: before, reader: during, crashed: true, want: charge.Processed, debits: 1},
		{name: "another payload under the previous key", written: before, reader: during, other: true, want: charge.Conflict, debits: 1},
		{name: "another payload before keys", written: nil, reader: during, other: true, want: charge.Conflict, debits: 1},
		{name: "the previous key dropped too early", written: before, reader: after, want: charge.Conflict, debits: 1},
		{name: "DONE under the current key", written: after, reader: during, want: charge.DuplicateDone, debits: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := smsFee("CHG-ROT")
			if tc.crashed {
				if _, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(tc.written)); err != nil {
					t.Fatal(err)
				}
				f.clock.Advance(lease)
			} else {
				wantOutcome(t, f.service(t, tc.written).Process(t.Context(), c, nil), charge.Processed)
			}
			again := c
			if tc.other {
				again.Amount.Minor++
			}
			res := f.service(t, tc.reader).Process(t.Context(), again, nil)
			wantOutcome(t, res, tc.want)
			if got := f.ledger.total(); got != tc.debits {
				t.Errorf("%d debits, want %d", got, tc.debits)
			}
			if tc.name == "the previous key dropped too early" && !strings.Contains(res.Reason, "key this process does not hold") {
				t.Errorf("reason %q does not say the key is missing", res.Reason)
			}
			if r := f.record(t, c.ID); tc.crashed && (r.State != driver.StateDone || r.Attempt != 2) {
				t.Errorf("record %s attempt %d, want DONE at attempt 2", r.State, r.Attempt)
			}
		})
	}
}

func TestAShortFingerprintKeyIsRefused(t *testing.T) {
	if _, err := idempotency.NewFingerprinter([]byte("too short")); err == nil {
		t.Error("a 9-byte key was accepted")
	}
	if _, err := idempotency.NewFingerprinter(key(1), []byte("short")); err == nil {
		t.Error("a short previous key was accepted")
	}
}
