package recon_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/recon"
	"github.com/finedge/idempotent-consumer/app/service/session"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// An adoption writes the charge's record DONE — the record that stops a
// redelivery of the charge debiting again — kept --retention. reconcile
// resolve took any positive one: --retention 1s adopts a posting and the
// record is gone a second later, the next delivery of the charge debiting
// again. serve, the console and a direct reopen refuse a retention under
// 24h; so must resolve.
func TestAttack53MovedResolveRetentionUnderADayLetsTheAdoptedRecordLapse(t *testing.T) {
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	store := claimedAndDead(t)
	st := statementOf(t)
	var log strings.Builder
	r := recon.ResolveRequest{ChargeID: "CHGA1", Reason: "INC-1: checked by hand", Unverified: true, Lease: 20 * time.Millisecond, Retention: 50 * time.Millisecond,
		Session: &session.Session{Policy: approval.Off}, Who: func() (approval.Actor, error) { return olga, nil }, Claimed: func() approval.Actor { return olga }, Log: &log}
	err := r.Check()
	if err == nil || !isUsage(err) || !strings.Contains(err.Error(), "--retention") {
		// What it lets happen: the adopted record lapses at once.
		res, rerr := recon.Resolve(t.Context(), store, st, r)
		time.Sleep(100 * time.Millisecond)
		_, gerr := store.Get(t.Context(), "CHGA1", time.Now())
		t.Fatalf("--retention 50ms: Check said %v; resolve %s (%v), and the DONE record read again: %v (a redelivery claims afresh and debits again)",
			err, res.Action, rerr, gerr)
	}
	if r.Retention = 23 * time.Hour; r.Check() == nil {
		t.Fatal("--retention 23h accepted")
	}
	if _, gerr := store.Get(t.Context(), "CHGA1", time.Now()); gerr != nil && !errors.Is(gerr, driver.ErrNotFound) {
		t.Fatal(gerr)
	}
}

// bulk>0 asks a second operator for every action touching a charge: a
// direct reopen, redrive or renotify of one charge is refused with the
// command that proposes it. reconcile resolve judged the policy only when
// it had reconcile-adopt, so under bulk>0 one operator adopted a posting
// (money recorded as collected without a debit) alone.
func TestAttack53MovedResolveUnderBulkOverZeroNeedsAProposal(t *testing.T) {
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	p, err := approval.ParsePolicy("bulk>0")
	if err != nil {
		t.Fatal(err)
	}
	if why := p.Needs(approval.Spec{Kind: approval.Reopen}, 1); why == "" {
		t.Fatal("bulk>0 does not ask approval of a reopen of one charge: the premise is wrong")
	}
	store := claimedAndDead(t)
	st := statementOf(t)
	var log strings.Builder
	r := recon.ResolveRequest{ChargeID: "CHGA1", Reason: "INC-1: checked by hand", Unverified: true, Lease: time.Minute, Retention: 30 * 24 * time.Hour,
		Session: &session.Session{Policy: p}, Who: func() (approval.Actor, error) { return olga, nil }, Claimed: func() approval.Actor { return olga }, Log: &log}
	res, err := recon.Resolve(t.Context(), store, st, r)
	if err == nil || !strings.Contains(err.Error(), "chargerecovery approvals propose reconcile --charge-id CHGA1") {
		t.Fatalf("resolve under bulk>0: %s, %v; want it refused with the command that proposes it", res.Action, err)
	}
	if rec, err := store.Get(t.Context(), "CHGA1", time.Now()); err != nil || rec.State != driver.StateInProgress {
		t.Fatalf("the record was written without approval: %+v %v", rec, err)
	}
}
