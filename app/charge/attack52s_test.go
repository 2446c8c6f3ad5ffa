package charge_test

import (
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Attack 52s: a record written before summaries, under a fingerprint key
// since rotated (a previous key), whose consumer died (IN_PROGRESS, lease
// passed). The new version claims it twice — first under the current key
// (a conflict), then with the record's own fingerprint — and the claim
// that takes it must write the charge's summary, so that reconciliation
// compares its posting instead of matching it by key only.
func TestAttack52sAnOlderRecordUnderAPreviousKeyGetsItsSummary(t *testing.T) {
	f := newFixture(t)
	oldKey, newKey := []byte("attack52s-old-fingerprint-key-0123"), []byte("attack52s-new-fingerprint-key-0123")
	old, err := idempotency.NewFingerprinter(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	c := smsFee("CHG-A52S-1")
	if cl, err := f.guard.Claim(t.Context(), c.ID, c.Fingerprint(old)); err != nil || !cl.Outcome.Owned() {
		t.Fatalf("the older claim: %v %v", cl.Outcome, err)
	}
	if r := f.record(t, c.ID); r.Summary != "" {
		t.Fatalf("the older record has summary %q", r.Summary)
	}
	f.clock.Advance(2 * lease)
	rotated, err := idempotency.NewFingerprinter(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: f.guard, Debiter: f.ledger, Notifier: f.notes, Fingerprints: rotated})
	if err != nil {
		t.Fatal(err)
	}
	res := svc.Process(t.Context(), c, nil)
	if res.Outcome != charge.Processed {
		t.Fatalf("outcome %v (%s)", res.Outcome, res.Reason)
	}
	if r := f.record(t, c.ID); r.State != driver.StateDone || r.Summary != "2500 INR 7890" {
		t.Fatalf("record %s with summary %q, want DONE with %q", r.State, r.Summary, "2500 INR 7890")
	}
}
