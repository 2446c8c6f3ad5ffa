package charge_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/queue"
)

func TestSummaryIsKeptAndReadBack(t *testing.T) {
	for _, tt := range []struct {
		name    string
		account string
		amount  charge.Money
		kept    string
		shown   string
	}{
		{"an account number", "001234567890", charge.Money{Minor: 2500, Currency: "INR"}, "2500 INR 7890", "****7890"},
		{"an IBAN", "DE89370400440532013000", charge.Money{Minor: 1, Currency: "EUR"}, "1 EUR 3000", "****3000"},
		{"a short account keeps no last four", "1234", charge.Money{Minor: 99, Currency: "JPY"}, "99 JPY", ""},
		{"a zero amount", "ACCT-0001", charge.Money{Minor: 0, Currency: "USD"}, "0 USD 0001", "****0001"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := charge.SummaryOf(charge.Charge{ID: "CHG-1", AccountID: tt.account, Amount: tt.amount})
			if got := s.String(); got != tt.kept {
				t.Fatalf("kept as %q, want %q", got, tt.kept)
			}
			back, ok := charge.ParseSummary(s.String())
			if !ok || back != s {
				t.Fatalf("ParseSummary(%q) = %+v, %v; want %+v", s.String(), back, ok, s)
			}
			if back.Account() != tt.shown {
				t.Errorf("shown as %q, want %q", back.Account(), tt.shown)
			}
			if !back.SameAccount(tt.account) {
				t.Errorf("the summary does not name its own account %s", tt.account)
			}
		})
	}
}

func TestSummaryRefusesWhatItDidNotWrite(t *testing.T) {
	for _, s := range []string{"", "2500", "2500 INR 7890 x", "25.00 INR", "-1 INR", "+25 INR", "025 INR", "2500 inr", "2500 XXX",
		"2500 INR 789", "2500 INR 78901", "2500  INR", "99999999999999999999 INR"} {
		if got, ok := charge.ParseSummary(s); ok {
			t.Errorf("ParseSummary(%q) = %+v, want refused", s, got)
		}
	}
}

func TestSummaryComparesTheAccountsLastFour(t *testing.T) {
	s, _ := charge.ParseSummary("2500 INR 7890")
	for acct, want := range map[string]bool{"001234567890": true, "IN00BANK001234567890": true, "001234567891": false, "": true, "7890": false} {
		if got := s.SameAccount(acct); got != want {
			t.Errorf("SameAccount(%q) = %v, want %v", acct, got, want)
		}
	}
}

// A processed charge's record keeps its amount, currency and the account's
// last four in clear (what reconciliation compares every posting with),
// and so does the claim a queue makes in its receive's transaction.
func TestAProcessedChargeKeepsItsSummary(t *testing.T) {
	f := newFixture(t)
	c := smsFee("CHG-SUM-1")
	wantOutcome(t, f.svc.Process(t.Context(), c, nil), charge.Processed)
	if r := f.record(t, c.ID); r.State != driver.StateDone || r.Summary != "2500 INR 7890" {
		t.Fatalf("record %s with summary %q, want DONE with %q", r.State, r.Summary, "2500 INR 7890")
	}
	req, err := f.svc.ClaimRequest(smsFee("CHG-SUM-2"))
	if err != nil || req.Summary != "2500 INR 7890" {
		t.Fatalf("ClaimRequest summary %q, %v; want %q", req.Summary, err, "2500 INR 7890")
	}
}

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

type quietNotifier52s struct{}

func (quietNotifier52s) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	return nil
}

// Attack 52s: the charge's summary through the queue-bound claim path —
// charge.Service.ClaimRequest written by the claiming receive's
// transaction (the claim SQL's $8), then ProcessDelivery with the bound
// claim — for a new charge, and for an older record (written before
// summaries, IN_PROGRESS, its consumer dead) that the receive reclaims.
// Both end DONE with "2500 INR 7890".
func TestAttack52sTheQueueBoundClaimWritesTheSummary(t *testing.T) {
	db := pgtest.Open(t)
	q, err := postgres.NewQueue(db, postgres.QueueOptions{Name: dbtest.Name("a52s"), VisibilityTimeout: time.Minute, WaitTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := postgres.NewStore(db)
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := charge.NewService(charge.Options{Guard: g, Debiter: corebanksim.NewLedger(corebanksim.Faults{}), Notifier: quietNotifier52s{}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) charge.Charge {
		return charge.Charge{ID: id, AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	}
	fresh, older := mk(dbtest.Name("A52S-Q-")), mk(dbtest.Name("A52S-Q-old-"))
	// The older record: claimed without a summary an hour ago, never finished.
	req, err := g.ClaimRequest(older.ID, older.Fingerprint(nil))
	if err != nil {
		t.Fatal(err)
	}
	req.Now, req.LeaseUntil = req.Now.Add(-time.Hour), req.Now.Add(-time.Hour+time.Minute)
	if res, err := s.Claim(t.Context(), req); err != nil || !res.Acquired || res.Record.Summary != "" {
		t.Fatalf("the older claim: %+v %v", res, err)
	}
	p := queue.ClaimPolicy{Read: func(m queue.Message) (driver.ClaimRequest, any, bool) {
		var c charge.Charge
		if json.Unmarshal(m.Body, &c) != nil {
			return driver.ClaimRequest{}, nil, false
		}
		req, err := svc.ClaimRequest(c)
		return req, c, err == nil
	}}
	for _, c := range []charge.Charge{fresh, older} {
		body, _ := json.Marshal(c)
		if _, err := q.Send(t.Context(), body, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []queue.Message
	for deadline := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		msgs, err := q.ReceiveClaiming(t.Context(), 2, p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	if len(got) != 2 {
		t.Fatalf("received %d of 2", len(got))
	}
	for _, m := range got {
		c := m.Parsed().(charge.Charge)
		if m.Bound == nil {
			t.Fatalf("%s: received unbound", c.ID)
		}
		if claimed, err := s.Get(t.Context(), c.ID, time.Now()); err != nil || claimed.Summary != "2500 INR 7890" {
			t.Fatalf("%s as the receive claimed it: summary %q, %v", c.ID, claimed.Summary, err)
		}
		if res := svc.ProcessDelivery(t.Context(), c, charge.Delivery{Bound: m.Bound}); res.Outcome != charge.Processed {
			t.Fatalf("%s: %v (%s)", c.ID, res.Outcome, res.Reason)
		}
		if r, err := s.Get(t.Context(), c.ID, time.Now()); err != nil || r.State != driver.StateDone || r.Summary != "2500 INR 7890" {
			t.Fatalf("%s: record %s summary %q (%v); want DONE with 2500 INR 7890", c.ID, r.State, r.Summary, err)
		}
	}
}
