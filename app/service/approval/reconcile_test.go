package approval_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// A reconciliation adoption under reconcile-adopt: proposed by olga (the
// break frozen), her own approval refused, approved by ivan, run once (the
// record DONE with the bank's reference), a second run does nothing; a
// proposal whose break changed before its run (the record was finished
// meanwhile) is held back, nothing written; marking a break resolved is
// approved at its proposal.
func TestReconcileProposal(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	store := memstore.New()
	fp, err := idempotency.NewFingerprinter([]byte("approval-reconcile-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	// The consumer's claims: a short lease that passes, no skew margin.
	consumer, err := idempotency.NewGuard(store, idempotency.Options{Lease: 50 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	mk := func(id string) charge.Charge {
		return charge.Charge{ID: id, AccountID: "0012345678901", Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: today}
	}
	crashed, changed, lost := mk("CHG-A-1"), mk("CHG-A-2"), mk("CHG-A-3")
	for _, c := range []charge.Charge{crashed, changed, lost} {
		cl, err := consumer.Claim(ctx, c.ID, c.Fingerprint(fp))
		if err != nil || !cl.Outcome.Owned() {
			t.Fatalf("claim %s: %v %v", c.ID, cl.Outcome, err)
		}
		if c.ID == lost.ID {
			if err := consumer.Complete(ctx, cl.Lease(), string(charge.Debited), "REF-"+c.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(120 * time.Millisecond) // the crashed claims' leases pass
	stmt := filepath.Join(dir, "camt053.xml")
	f, err := os.Create(stmt)
	if err != nil {
		t.Fatal(err)
	}
	var posts []statement.Posting
	for _, c := range []charge.Charge{crashed, changed} {
		req := c.DebitRequest()
		posts = append(posts, statement.Posting{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: c.Amount, BookingDate: today,
			Reference: "BANK-" + c.ID, Narrative: req.Narrative})
	}
	if err := statement.WriteCamt053(f, statement.StatementInfo{ID: "STMT-1", Account: "FEES-001", Created: time.Now(),
		Period: statement.Period{From: today, To: today.AddDate(0, 0, 1)}}, posts); err != nil {
		t.Fatal(err)
	}
	f.Close()

	trail, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	pol, _ := approval.ParsePolicy("reconcile-adopt")
	book, err := approval.Open(trail, approval.Options{Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := idempotency.NewGuard(store, idempotency.Options{SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	be := approval.Backend{Store: store, Retention: idempotency.DefaultRetention, Guard: runner, Fingerprints: fp}
	spec := func(id string) approval.Spec {
		return approval.Spec{Kind: approval.Reconcile, Reason: "INC-77: the bank posted it", ChargeIDs: []string{id},
			Statements: []string{stmt}, CollectionAccount: "FEES-001"}
	}
	propose := func(id string) approval.Proposal {
		t.Helper()
		targets, err := be.Select(ctx, spec(id), time.Now())
		if err != nil {
			t.Fatalf("select %s: %v", id, err)
		}
		p, err := book.Propose(olga, spec(id), targets)
		if err != nil {
			t.Fatalf("propose %s: %v", id, err)
		}
		return p
	}

	p := propose(crashed.ID)
	if p.State != approval.Pending || p.Needs == "" || p.Spec.BreakKind != reconcile.PostedNotRecorded || len(p.Targets) != 1 ||
		p.Targets[0].BreakID == "" || p.Targets[0].Minor != 2500 || p.Targets[0].Currency != "INR" || strings.Contains(p.Targets[0].Account, crashed.AccountID) {
		t.Fatalf("proposal: %+v", p)
	}
	if rec, _ := store.Get(ctx, crashed.ID, time.Now()); rec.State != driver.StateInProgress {
		t.Fatalf("the proposal wrote the record: %+v", rec)
	}
	if _, err := book.Approve(p.ID, olga); !errors.Is(err, approval.ErrSamePerson) {
		t.Fatalf("olga approved her own adoption: %v", err)
	}
	if _, err := book.Run(ctx, p.ID, olga, be, nil); !errors.Is(err, approval.ErrState) {
		t.Fatalf("run before approval: %v", err)
	}
	if _, err := book.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	done, err := book.Run(ctx, p.ID, ivan, be, nil)
	if err != nil || done.State != approval.Done || done.Counts()["adopted"] != 1 {
		t.Fatalf("run: %v %s %v", err, done.State, done.Outcomes)
	}
	rec, err := store.Get(ctx, crashed.ID, time.Now())
	if err != nil || rec.State != driver.StateDone || charge.ReferenceOf(rec.Status, rec.Detail) != "BANK-"+crashed.ID || len(rec.History) != 1 {
		t.Fatalf("adopted record: %+v %v", rec, err)
	}
	before, _ := trail.All(audit.Filter{})
	if _, err := book.Run(ctx, p.ID, ivan, be, nil); !errors.Is(err, approval.ErrState) {
		t.Fatalf("second run: %v", err)
	}
	after, _ := trail.All(audit.Filter{})
	if rec2, _ := store.Get(ctx, crashed.ID, time.Now()); len(after) != len(before) || rec2.Token != rec.Token || len(rec2.History) != 1 {
		t.Fatalf("the second run acted: %d → %d lines, record %+v", len(before), len(after), rec2)
	}
	var batch *audit.Entry
	for i := range after {
		if after[i].Proposal == p.ID && after[i].Action == "batch" {
			batch = &after[i]
		}
	}
	if batch == nil || len(batch.Charges) != 1 || batch.Charges[0] != crashed.ID || !strings.Contains(batch.Detail, "1 resolved") {
		t.Fatalf("batch line: %+v", batch)
	}

	// The break changes between the proposal and its run: the consumer
	// finishes the record meanwhile. Held back, nothing written.
	q := propose(changed.ID)
	if _, err := book.Approve(q.ID, ivan); err != nil {
		t.Fatal(err)
	}
	cl, err := runner.Claim(ctx, changed.ID, changed.Fingerprint(fp))
	if err != nil || cl.Outcome != idempotency.Reclaimed {
		t.Fatalf("reclaim: %v %v", cl.Outcome, err)
	}
	if err := runner.Complete(ctx, cl.Lease(), string(charge.Debited), "BANK-"+changed.ID); err != nil {
		t.Fatal(err)
	}
	finished, _ := store.Get(ctx, changed.ID, time.Now())
	q, err = book.Run(ctx, q.ID, ivan, be, nil)
	o := q.Outcomes["charge:"+changed.ID]
	if err != nil || o.Result != "held back" || !strings.Contains(o.Why, "the break changed since it was proposed") {
		t.Fatalf("changed break: %v %+v", err, o)
	}
	if now, _ := store.Get(ctx, changed.ID, time.Now()); now.Token != finished.Token || len(now.History) != 0 || now.Status != string(charge.Debited) {
		t.Fatalf("a changed break was acted on: %+v", now)
	}

	// Marking a break resolved needs no approval: approved at once.
	m := propose(lost.ID)
	if m.State != approval.Approved || m.Needs != "" || m.Spec.BreakKind != reconcile.RecordedNotPosted {
		t.Fatalf("marking: %s needs %q kind %s", m.State, m.Needs, m.Spec.BreakKind)
	}
	if m, err = book.Run(ctx, m.ID, olga, be, nil); err != nil || m.Counts()["resolved"] != 1 {
		t.Fatalf("mark run: %v %v", err, m.Outcomes)
	}
}
