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

// deadLetter dead-letters n charges with code on the backend open opens.
func deadLetter(t *testing.T, open func() (*backend.Backend, error), code queue.Code, n int) {
	t.Helper()
	ctx := t.Context()
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range n {
		_, err := b.Queue.Send(ctx, fmt.Appendf(nil, `{"chargeId":"CHG-%d"}`, i), nil)
		var msgs []queue.Message
		if err == nil {
			msgs, err = b.Queue.Receive(ctx, 1)
		}
		if err == nil && len(msgs) == 1 {
			err = b.Queue.DeadLetter(ctx, msgs[0], queue.Reason{Code: code, Detail: "declined"})
		}
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dead-letter %d: %v (%d received)", i, err, len(msgs))
		}
	}
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
