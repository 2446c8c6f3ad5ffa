package proposals_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
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
	for i := range n {
		_, err := b.Queue.Send(ctx, fmt.Appendf(nil, `{"chargeId":"CHG-%d"}`, i), nil)
		var msgs []queue.Message
		if err == nil {
			msgs, err = b.Queue.Receive(ctx, 1)
		}
		if err == nil && len(msgs) == 1 {
			err = b.Queue.DeadLetter(ctx, msgs[0], queue.Reason{Code: "conflict", Detail: "another payload"})
		}
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dead-letter %d: %v (%d received)", i, err, len(msgs))
		}
	}
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
