package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// A bank in India writes its statement's FrToDt in its own time, without
// an offset (FrDtTm 2026-11-20T00:00:00, ToDtTm 2026-11-20T23:59:59), and
// the daily job says --time-zone Asia/Kolkata (IC_TIME_ZONE), as the
// docs' example does. The period is still read as UTC: [05:30, 05:30 the
// next day) in the bank's time. A charge debited at 02:00 the next
// morning (IST) — on the next day's statement — is walked as finished in
// this period and reported recorded_not_posted, every day, for every
// charge finished between midnight and 05:30.
func TestAttack2NaiveStatementTimesIgnoreTheTimeZone(t *testing.T) {
	s := newAttackSetup(t)
	s.env["IC_TIME_ZONE"] = "Asia/Kolkata"
	ist, _ := time.LoadLocation("Asia/Kolkata")
	d := time.Date(2026, 11, 20, 0, 0, 0, 0, ist)
	doneAt := func(c charge.Charge, at time.Time) {
		g, err := idempotency.NewGuard(s.b.Store, idempotency.Options{Lease: time.Minute, Retention: 5 * 365 * 24 * time.Hour, SkewMargin: -1, Clock: storetest.NewClock(at)})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := g.Claim(t.Context(), c.ID, c.Fingerprint(s.fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if err := g.Complete(t.Context(), cl.Lease(), string(charge.Debited), "REF-"+c.ID); err != nil {
			t.Fatal(err)
		}
	}
	day := s.charge("CHG-TZ-1")  // debited 10:00 IST on the 20th, on the 20th's statement
	next := s.charge("CHG-TZ-2") // debited 02:00 IST on the 21st, on the 21st's statement
	doneAt(day, d.Add(10*time.Hour))
	doneAt(next, d.Add(26*time.Hour))
	p := s.posting(day)
	p.BookingDate = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := statement.WriteCamt053(&buf, statement.StatementInfo{ID: "STMT-TZ", Account: "FEES-001", Created: time.Now(),
		Period: statement.Period{From: time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)}},
		[]statement.Posting{p}); err != nil {
		t.Fatal(err)
	}
	xml := strings.NewReplacer("Z</FrDtTm>", "</FrDtTm>", "Z</ToDtTm>", "</ToDtTm>").Replace(buf.String()) // the bank's own time
	file := filepath.Join(s.dir, "ist.xml")
	if err := os.WriteFile(file, []byte(xml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := s.run(t.Context(), "reconcile", "--statement", file, "--collection-account", "FEES-001")
	if r.code != 0 || strings.Contains(r.stdout, next.ID) {
		t.Fatalf("the 20th (IST) under --time-zone Asia/Kolkata: exit %d; %s, debited 02:00 IST on the 21st, is a break of the 20th:\n%s%s", r.code, next.ID, r.stdout, r.stderr)
	}
}
