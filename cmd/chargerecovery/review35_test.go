package main

import (
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
)

// ATTACK (surface 4): renotify's claims live in the charges' own key space.
// The key renotify/CHARGE_ID:pre-debit is itself a valid charge id (the
// wire pattern allows '/' and ':'), and every tool that reads the store
// takes the claim for a charge:
//   - a renotify run that stopped after claiming leaves an IN_PROGRESS
//     record past its lease, which `stuck` lists as a charge stuck mid-debit
//     ("Each is reclaimed by its next delivery; if the message is gone, see
//     the DLQ") and serve's stuck-claims gauge counts (its alert fires): an
//     operator chases a charge that does not exist;
//   - a charge event whose id is renotify/CHG-RN-000:pre-debit parses as
//     valid, and once CHG-RN-000's notice was resent its claim meets the
//     notice's DONE record with another fingerprint: a Conflict, so a real
//     charge is dead-lettered as "charge id reused with another payload"
//     and never collected (and the other way round, renotify skips the
//     notice if that charge came first).
func TestReview35RenotifyClaimsAreTakenForCharges(t *testing.T) {
	sink := newNoticeSink(t, 0)
	env, b, ids := missedNotices(t, sink, 2)

	// CHG-RN-001: a renotify that stopped right after claiming its notice.
	rec, err := b.Store.Get(t.Context(), ids[1], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	notice, _ := charge.PendingNotice(rec.Status, rec.Detail)
	crashed, err := idempotency.NewGuard(b.Store, idempotency.Options{Lease: 100 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := crashed.Claim(t.Context(), operate.NoticeClaimKey(notice), rec.Token); err != nil || cl.Outcome != idempotency.Acquired {
		t.Fatalf("the crashed run's claim: %v %v", cl.Outcome, err)
	}
	time.Sleep(300 * time.Millisecond) // past its lease
	var problems []string
	if r := runCmd(t.Context(), env, "stuck"); strings.Contains(r.stdout, "renotify/") {
		problems = append(problems, "stuck lists a renotify claim as a charge stuck mid-debit:\n"+r.stdout)
	}

	// CHG-RN-000: its notice resent (the claim DONE SENT), then a charge
	// whose id is that claim's key.
	if r := runCmd(t.Context(), env, "renotify", ids[0], "--reason", "INC-35"); r.code != 0 || !strings.Contains(r.stdout, "1 sent") {
		t.Fatalf("renotify %s: %d\n%s\n%s", ids[0], r.code, r.stdout, r.stderr)
	}
	twin := charge.Charge{ID: "renotify/" + charge.NotificationKey(ids[0]), AccountID: "009876500077",
		Amount: charge.Money{Minor: 4200, Currency: "INR"}, Type: charge.ChequeBookFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	body, err := charge.MarshalEvent(twin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := charge.ParseEvent(body); err != nil {
		t.Fatalf("the twin charge does not parse (the collision needs a valid id): %v", err)
	}
	g, err := idempotency.NewGuard(b.Store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := g.Claim(t.Context(), twin.ID, "fp-of-the-twin-charge"); err != nil || cl.Outcome != idempotency.Acquired {
		problems = append(problems, "the first delivery of charge "+twin.ID+" claims as "+cl.Outcome.String()+
			" (record "+string(cl.Record.State)+" "+cl.Record.Status+"): a real charge is refused because a notice's claim holds its id")
	}
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
}
