package proposals_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/proposals"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/queue"
)

// dead is an embedded backend with n conflicts dead-lettered, and a book
// under policy beside a trail; open opens the backend again, as a run
// does.
func dead(t *testing.T, n int, policy string) (open func() (*backend.Backend, error), book *approval.Book) {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	cfg := backend.Config{Kind: backend.Embedded, DB: filepath.Join(dir, "ic.db"), Queue: "charges"}
	open = func() (*backend.Backend, error) { return backend.Open(ctx, cfg, 0, true) }
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sendAndDeadLetter(t, b, queue.Reason{Code: "conflict", Detail: "another payload"}, n)
	p, err := approval.ParsePolicy(policy)
	var trail *audit.Trail
	if err == nil {
		trail, err = audit.Open(filepath.Join(dir, "audit.jsonl"))
	}
	if err == nil {
		t.Cleanup(func() { trail.Close() })
		book, err = approval.Open(trail, approval.Options{Policy: &p})
	}
	if err != nil {
		t.Fatal(err)
	}
	return open, book
}

func TestAProposalIsDecidedByAnotherOperatorAndRuns(t *testing.T) {
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	ivan := approval.Actor{Name: "ivan", Role: "operator", Via: "cli"}
	for _, tc := range []struct {
		name    string
		d       proposals.Decision
		decider approval.Actor
		said    string // what Decide tells Out
		ran     bool
		state   approval.State
		err     string
	}{
		{name: "approved and run", d: proposals.Decision{Sub: "approve"}, decider: ivan, said: "approved ", ran: true, state: approval.Done},
		{name: "approved only", d: proposals.Decision{Sub: "approve", NoRun: true}, decider: ivan, said: "next: chargerecovery approvals run ", state: approval.Approved},
		{name: "rejected", d: proposals.Decision{Sub: "reject", Reason: "not today"}, decider: ivan, said: "nothing of it will run", state: approval.Rejected},
		{name: "approved by its proposer", d: proposals.Decision{Sub: "approve"}, decider: olga, err: "another operator must"},
		{name: "run before approval", d: proposals.Decision{Sub: "run"}, decider: ivan, err: "waits for another operator's approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			open, book := dead(t, 3, "redrive-force")
			p, err := proposals.Propose(ctx, book, olga, approval.Spec{Kind: approval.Redrive, Force: true, Reason: "INC-7"}, approval.Backend{Retention: idempotency.DefaultRetention}, open)
			if err != nil || len(p.Targets) != 3 || p.Needs == "" {
				t.Fatalf("propose: %+v, %v", p, err)
			}
			var out bytes.Buffer
			var batches int
			tc.d.ID, tc.d.Out = p.ID, &out
			tc.d.Who = func(string) (approval.Actor, error) { return tc.decider, nil }
			got, ran, err := proposals.Decide(ctx, book, tc.d, proposals.RunOptions{Open: open, Retention: idempotency.DefaultRetention, Progress: func(approval.Proposal) { batches++ }})
			if tc.err != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.err)) {
					t.Fatalf("decide: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || ran != tc.ran || got.State != tc.state || !bytes.Contains(out.Bytes(), []byte(tc.said)) {
				t.Fatalf("decide: %s ran %v, %v; said %q", got.State, ran, err, out.String())
			}
			if ran && (batches == 0 || got.Counts()["failed"] != 0 || proposals.Failed(got) != nil) {
				t.Fatalf("run: %d batch(es), %v", batches, got.Counts())
			}
			if listed, err := proposals.Listed(book, false); err != nil || len(listed) != map[bool]int{true: 1, false: 0}[tc.state == approval.Approved] {
				t.Fatalf("listed %d, %v", len(listed), err)
			}
			if all, err := proposals.Listed(book, true); err != nil || len(all) != 1 {
				t.Fatalf("every one: %d, %v", len(all), err)
			}
		})
	}
}

// sendAndDeadLetter sends n charges (CHG-0, CHG-1…) to b's queue, receives
// each and dead-letters it for reason.
func sendAndDeadLetter(t *testing.T, b *backend.Backend, reason queue.Reason, n int) {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		_, err := b.Queue.Send(ctx, fmt.Appendf(nil, `{"chargeId":"CHG-%d"}`, i), nil)
		var msgs []queue.Message
		if err == nil {
			msgs, err = b.Queue.Receive(ctx, 1)
		}
		if err == nil && len(msgs) == 1 {
			err = b.Queue.DeadLetter(ctx, msgs[0], reason)
		}
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dead-letter %d: %v (%d received)", i, err, len(msgs))
		}
	}
}

// deadLetter dead-letters n charges with code on the backend open opens.
func deadLetter(t *testing.T, open func() (*backend.Backend, error), code queue.Code, n int) {
	t.Helper()
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sendAndDeadLetter(t, b, queue.Reason{Code: code, Detail: "declined"}, n)
}

// A redrive holds back DLQ entries older than the retention less a day:
// their record, which stops a second debit, is gone when the message
// comes back. approvals run's --retention at a day or less makes that age
// 0 — "no limit" — so a run given --retention 1h redrives every entry,
// however old, without --force (which the policy may want approved): a
// direct redrive refuses such a retention (--max-age must be positive),
// and so must a proposal's run.
func TestAttack53MovedRunRetentionUnderADayRedrivesEveryEntry(t *testing.T) {
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	t.Run("a day and a millisecond holds back what is older than a millisecond", func(t *testing.T) {
		ctx := t.Context()
		open, book := dead(t, 0, "redrive-force")
		deadLetter(t, open, "debit_failed", 2)
		p, err := proposals.Propose(ctx, book, olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, approval.Backend{Retention: idempotency.DefaultRetention}, open)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		d := proposals.Decision{Sub: "run", ID: p.ID, Out: new(bytes.Buffer), Who: func(string) (approval.Actor, error) { return olga, nil }}
		got, _, err := proposals.Decide(ctx, book, d, proposals.RunOptions{Open: open, Retention: 24*time.Hour + time.Millisecond})
		if err != nil || got.Counts()["held back"] != 2 {
			t.Fatalf("%v, %v: want both held back as too old", got.Counts(), err)
		}
	})
	for _, retention := range []time.Duration{time.Hour, 24 * time.Hour, -time.Hour} {
		t.Run(retention.String(), func(t *testing.T) {
			ctx := t.Context()
			open, book := dead(t, 0, "redrive-force")
			deadLetter(t, open, "debit_failed", 2)
			p, err := proposals.Propose(ctx, book, olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, approval.Backend{Retention: idempotency.DefaultRetention}, open)
			if err != nil || len(p.Targets) != 2 || p.Needs != "" {
				t.Fatalf("propose: %+v, %v", p, err)
			}
			var out bytes.Buffer
			d := proposals.Decision{Sub: "run", ID: p.ID, Out: &out, Who: func(string) (approval.Actor, error) { return olga, nil }}
			got, ran, err := proposals.Decide(ctx, book, d, proposals.RunOptions{Open: open, Retention: retention})
			var ue *cli.UsageError
			if ran || !errors.As(err, &ue) {
				t.Fatalf("a run with --retention %s: ran %v (%v), %v; want a usage error, nothing moved", retention, ran, got.Counts(), err)
			}
			b, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			d2, err := b.Queue.Depth(ctx)
			if err != nil || d2.DLQ != 2 {
				t.Fatalf("the DLQ: %+v, %v; want both entries still there", d2, err)
			}
			if cur, err := book.Get(p.ID); err != nil || cur.State != approval.Approved {
				t.Fatalf("the proposal: %s, %v; want it approved still, not run", cur.State, err)
			}
		})
	}
}

// approvals approve runs what it approves: a run flag with a bad value
// (a reconcile proposal's --lease 0) was found after the approval was
// written — exit 2 for an approval that stood. Said first, nothing
// decided.
func TestAttack53MovedABadRunFlagIsSaidBeforeTheApproval(t *testing.T) {
	ctx := t.Context()
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	ivan := approval.Actor{Name: "ivan", Role: "operator", Via: "cli"}
	open, book := dead(t, 0, "all")
	p, err := book.Propose(olga, approval.Spec{Kind: approval.Reconcile, Reason: "INC-7", ChargeIDs: []string{"CHGA1"}, Statements: []string{"/nonexistent.csv"},
		From: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), BreakKind: "posted_not_recorded"},
		[]approval.Target{{ChargeID: "CHGA1", Code: "posted_not_recorded", BreakID: "b1"}})
	if err != nil || p.Needs == "" {
		t.Fatalf("propose: %+v, %v", p, err)
	}
	d := proposals.Decision{Sub: "approve", ID: p.ID, Out: new(bytes.Buffer), Who: func(string) (approval.Actor, error) { return ivan, nil }}
	_, ran, err := proposals.Decide(ctx, book, d, proposals.RunOptions{Open: open, Retention: idempotency.DefaultRetention, Lease: 0})
	var ue *cli.UsageError
	if ran || !errors.As(err, &ue) {
		t.Fatalf("approve with --lease 0: ran %v, %v; want a usage error", ran, err)
	}
	if cur, err := book.Get(p.ID); err != nil || cur.State != approval.Pending {
		t.Fatalf("the proposal: %s, %v; want it pending still (nothing decided)", cur.State, err)
	}
}

// A run stopped after its first batch (a kill, Ctrl-C) and run again:
// every charge is moved back to the queue once — never twice (a second
// delivery is a second debit attempt) — and the proposal ends done.
func TestAttack53MovedARunStoppedAndRunAgainMovesEachChargeOnce(t *testing.T) {
	olga := approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	open, _ := dead(t, 0, "off")
	deadLetter(t, open, "debit_failed", 5)
	trail, err := audit.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	book, err := approval.Open(trail, approval.Options{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proposals.Propose(t.Context(), book, olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, approval.Backend{Retention: idempotency.DefaultRetention}, open)
	if err != nil || len(p.Targets) != 5 {
		t.Fatalf("propose: %d, %v", len(p.Targets), err)
	}
	ctx, stop := context.WithCancel(t.Context())
	d := proposals.Decision{Sub: "run", ID: p.ID, Out: new(bytes.Buffer), Who: func(string) (approval.Actor, error) { return olga, nil }}
	o := proposals.RunOptions{Open: open, Retention: idempotency.DefaultRetention, Progress: func(approval.Proposal) { stop() }}
	if _, ran, err := proposals.Decide(ctx, book, d, o); ran || err == nil {
		t.Fatalf("the stopped run: ran %v, %v", ran, err)
	}
	o.Progress = nil
	got, ran, err := proposals.Decide(t.Context(), book, d, o)
	if err != nil || !ran || got.State != approval.Done || got.Counts()["moved"] != 5 {
		t.Fatalf("run again: %s %v, ran %v, %v", got.State, got.Counts(), ran, err)
	}
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if dp, err := b.Queue.Depth(t.Context()); err != nil || dp.Waiting != 5 || dp.DLQ != 0 {
		t.Fatalf("after the runs: %+v, %v; want each of the 5 on the queue once", dp, err)
	}
	if _, _, err := proposals.Decide(t.Context(), book, d, o); err == nil {
		t.Fatal("a done proposal ran a third time")
	}
}
