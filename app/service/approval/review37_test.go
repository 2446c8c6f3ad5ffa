package approval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/queue"
)

// countingExec records every target it is asked to act on, and how often.
type countingExec struct {
	mu     sync.Mutex
	n      map[string]int
	before func(call int) // called at the start of each Execute
	calls  int
}

func (c *countingExec) Execute(ctx context.Context, p approval.Proposal, batch []approval.Target, who approval.Actor) map[string]approval.Outcome {
	c.mu.Lock()
	c.calls++
	call := c.calls
	c.mu.Unlock()
	if c.before != nil {
		c.before(call)
	}
	out := map[string]approval.Outcome{}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	for _, t := range batch {
		c.n[t.ChargeID]++ // "a debit"
		out[t.Key()] = approval.Outcome{Result: "moved"}
	}
	return out
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func attackBook(t *testing.T, pol string, batch int) (*approval.Book, *audit.Trail, string, *clock) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	trail, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trail.Close() })
	p, _ := approval.ParsePolicy(pol)
	clk := &clock{t: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)}
	b, err := approval.Open(trail, approval.Options{Policy: &p, Batch: batch, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return b, trail, path, clk
}

func targets(ids ...string) []approval.Target {
	var out []approval.Target
	for _, id := range ids {
		out = append(out, approval.Target{ChargeID: id, DLQID: "m-" + id, Minor: 2500, Currency: "INR", Account: "********7890"})
	}
	return out
}

func editProposal(t *testing.T, auditPath, id string, edit func(m map[string]any)) {
	t.Helper()
	f := filepath.Join(auditPath+".proposals", id+".json")
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(f, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// ATTACK: the proposal file is the only record a run trusts, and nothing
// binds it to what was proposed and approved. (a) An operator with the
// CLI's file access turns her own pending proposal into "approved" by
// hand and runs it: no second operator ever approved, the trail has no
// approve line. (b) After ivan approved 2 charges, charges are added to
// the file and the run acts on them: nobody approved them.
//
// Expected: Run refuses a proposal whose file does not match what the
// trail says was proposed and approved (e.g. a digest of spec+targets in
// the propose and approve lines, checked at Run; or a keyed MAC on the
// file): the executor is never called for a hand-approved proposal nor
// for a target outside the approved set.
func TestAttackHandEditedProposalFile(t *testing.T) {
	t.Run("pending edited to approved", func(t *testing.T) {
		b, _, path, _ := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-2"}, targets("CHG-A", "CHG-B"))
		if err != nil || p.State != approval.Pending {
			t.Fatal(err, p.State)
		}
		editProposal(t, path, p.ID, func(m map[string]any) { m["state"] = "approved"; m["needs"] = "" })
		ex := &countingExec{}
		_, err = b.Run(t.Context(), p.ID, olga, ex, nil)
		if ex.calls > 0 {
			t.Fatalf("a proposal nobody approved was run by its proposer (hand-edited file): acted on %v (Run err %v)", ex.n, err)
		}
	})
	t.Run("targets added after approval", func(t *testing.T) {
		b, _, path, _ := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-3"}, targets("CHG-A", "CHG-B"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Approve(p.ID, ivan); err != nil {
			t.Fatal(err)
		}
		editProposal(t, path, p.ID, func(m map[string]any) {
			ts := m["targets"].([]any)
			m["targets"] = append(ts, map[string]any{"chargeId": "CHG-EVIL", "dlqId": "m-CHG-EVIL", "minor": 99999999, "currency": "INR"})
		})
		ex := &countingExec{}
		_, err = b.Run(t.Context(), p.ID, olga, ex, nil)
		if ex.n["CHG-EVIL"] > 0 {
			t.Fatalf("the run acted on a charge added to the file after approval: %v (Run err %v)", ex.n, err)
		}
	})
}

// ATTACK: a batch is acted on, then its audit line cannot be written (the
// audit file is swapped for /dev/full mid-run: a full disk). Run returns
// the error with the batch's outcomes unsaved, so the resumed run acts on
// the same targets again.
//
// Expected: no target is acted on twice: what a batch did is saved
// (proposal file) before, or independently of, its audit line, or the
// run records its intent before acting so that a resume does not repeat
// blindly.
func TestAttackAuditFailureAfterBatchActsTwice(t *testing.T) {
	b, _, path, clk := attackBook(t, "all", 2)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-4"}, targets("CHG-1", "CHG-2", "CHG-3", "CHG-4"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	saved := path + ".real"
	ex := &countingExec{}
	ex.before = func(call int) {
		if call == 1 { // the disk fills while the first batch is acted on
			if err := os.Rename(path, saved); err != nil {
				t.Error(err)
			}
			if err := os.Symlink("/dev/full", path); err != nil {
				t.Error(err)
			}
		}
	}
	_, err = b.Run(t.Context(), p.ID, ivan, ex, nil)
	if err == nil {
		t.Fatal("the run did not notice the full disk")
	}
	// The disk is freed; the run is resumed once its lease lapsed.
	os.Remove(path)
	if err := os.Rename(saved, path); err != nil {
		t.Fatal(err)
	}
	ex.before = nil
	clk.Add(5 * time.Minute)
	// Resumed from another process (the first one's trail still holds
	// /dev/full): a new trail and book on the same file.
	trail2, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer trail2.Close()
	b2, err := approval.Open(trail2, approval.Options{Batch: 2, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Run(t.Context(), p.ID, ivan, ex, nil); err != nil {
		t.Fatalf("resume: %v", err)
	}
	for id, n := range ex.n {
		if n > 1 {
			t.Errorf("%s acted on %d times (run 1 acted, its audit line failed, its outcomes were dropped, the resume acted again)", id, n)
		}
	}
}

// ATTACK: the run lease is renewed only between batches. A batch that
// takes longer than the lease (a renotify batch of 50 at a 5s notify
// timeout is 250s, the lease 2m) lets a second run (the console's Run
// button shows once the lease lapsed, or the CLI's approvals run) take the
// proposal over and act on the very targets the first run is acting on.
//
// Expected: a run keeps its hold while a batch is in flight (renewed
// during Execute, or the lease covers a batch's worst case), so that no
// target is acted on by two runs.
func TestAttackSlowBatchTakenOverActsTwice(t *testing.T) {
	b, _, _, clk := attackBook(t, "all", 50)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Renotify, Reason: "INC-5"}, targets("CHG-1", "CHG-2", "CHG-3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	inFlight, release := make(chan struct{}), make(chan struct{})
	ex := &countingExec{}
	ex.before = func(call int) {
		if call == 1 {
			close(inFlight)
			<-release // a slow notification channel
		}
	}
	first := make(chan error, 1)
	go func() { _, err := b.Run(context.Background(), p.ID, ivan, ex, nil); first <- err }()
	<-inFlight
	clk.Add(3 * time.Minute) // the batch is still going
	_, err2 := b.Run(t.Context(), p.ID, olga, ex, nil)
	close(release)
	err1 := <-first
	for id, n := range ex.n {
		if n > 1 {
			t.Errorf("%s acted on by two runs at once (%d times); first run: %v, second: %v", id, n, err1, err2)
		}
	}
}

// ATTACK: the reason is not bounded (the command line keeps it whole; the
// console clips it to 500). A reason just under the audit line limit
// leaves room for the propose line (20 sample charges) but not for a batch
// line (the reason again and up to 50 charges): every batch is acted on,
// then its line is refused ("over the 1048576-byte limit"), its outcomes
// are dropped, and every "run it again to resume" acts on the same batch
// again, with no disk fault at all.
//
// Expected: a reason is bounded at proposal (Spec.Check), or a batch line
// that cannot be written never leaves its actions unrecorded: no target is
// acted on twice, and the run can finish.
func TestAttackHugeReasonMakesEveryBatchRepeat(t *testing.T) {
	b, _, _, clk := attackBook(t, "all", 50)
	var ids []string
	for i := range 50 {
		ids = append(ids, fmt.Sprintf("CHG-%03d-%s", i, strings.Repeat("x", 120)))
	}
	reason := "INC-10 " + strings.Repeat("r", audit.MaxLine-6000)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: reason}, targets(ids...))
	if err != nil && strings.Contains(err.Error(), "at most") {
		return // bounded at proposal: nothing to repeat
	}
	if err != nil {
		t.Fatalf("propose: %v", err)
	}
	if _, err := b.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	ex := &countingExec{}
	for range 3 { // ivan runs it, and resumes it twice
		if _, err := b.Run(t.Context(), p.ID, ivan, ex, nil); err != nil {
			t.Logf("run: %.120v", err)
		}
		clk.Add(5 * time.Minute)
	}
	if n := ex.n[ids[0]]; n > 1 {
		t.Fatalf("%s... acted on %d times: each batch's audit line is over the limit, so its outcomes are never kept", ids[0][:8], n)
	}
}

// ATTACK: an approval has a shelf life (TTL) only until a run starts.
// Once a run stopped (a crash, Ctrl-C after one batch) the proposal stays
// "running" for ever, and anyone may resume it a month later on targets
// frozen then (a --force redrive approved for entries within retention
// then moves them past it, when the records that stop a second debit are
// gone).
//
// Expected: a stopped run whose proposal is older than its TTL (or whose
// approval is) is not resumed: Run refuses it (expired), and nothing more
// is acted on.
func TestAttackStoppedRunResumedAMonthLater(t *testing.T) {
	b, _, _, clk := attackBook(t, "all", 2)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Force: true, Reason: "INC-11"}, targets("CHG-1", "CHG-2", "CHG-3", "CHG-4"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ex := &countingExec{}
	ex.before = func(call int) {
		if call == 1 {
			cancel() // stopped during the first batch
		}
	}
	if _, err := b.Run(ctx, p.ID, ivan, ex, nil); err == nil {
		t.Fatal("the stopped run says it finished")
	}
	ex.before = nil
	clk.Add(30 * 24 * time.Hour)
	got, err := b.Run(t.Context(), p.ID, olga, ex, nil)
	if err == nil || ex.n["CHG-3"] > 0 {
		t.Fatalf("a run stopped 30 days ago was resumed on its frozen targets (TTL %s): state %s, acted on %v, err %v", b.TTL(), got.State, ex.n, err)
	}
}

// ATTACK: a DLQ entry whose body is not a valid charge is named by the
// chargeId its body gives, unmasked. A producer that put the account
// number there (as in the body's accountId) has the account in clear in
// the proposal's targets, its propose line of the audit trail, and
// everything that prints a target's name (console page, CLI show).
//
// Expected: a charge id read from an unreadable body is masked like the
// accounts the body names (MaskBody already masks that value elsewhere in
// the body): no 12-digit account in clear in the trail.
func TestAttackAccountInClearAsChargeIDOfAnUnreadableBody(t *testing.T) {
	w := newWorld(t, 0)
	ctx := t.Context()
	if _, err := w.q.Send(ctx, []byte(`{"chargeId":"001234567890","accountId":"001234567890"}`), nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := w.q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatal(err)
	}
	if err := w.q.DeadLetter(ctx, msgs[0], queue.Reason{Code: "conflict", Detail: "x"}); err != nil {
		t.Fatal(err)
	}
	b := w.book(t, "all", approval.Options{})
	spec := approval.Spec{Kind: approval.Redrive, Force: true, Reason: "INC-12"}
	ts, err := w.be.Select(ctx, spec, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Propose(olga, spec, ts); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(w.path)
	if strings.Contains(string(raw), "001234567890") || strings.Contains(fmt.Sprint(ts), "001234567890") {
		t.Fatalf("an account number in clear in the targets / audit trail:\n%v\n%s", ts, raw)
	}
}

// ATTACK: --approval-required bulk>0 ("every action touching a charge
// needs a second operator") is the zero Policy, which Open takes for "no
// policy given" and turns into Off: every proposal under it is approved
// at once and its proposer runs it alone, while the command line (which
// parses the flag itself) believes four-eyes is on.
//
// Expected: the book keeps the policy it was given: under bulk>0 a
// proposal of one charge is pending, and its proposer cannot run it.
func TestAttackBulkZeroPolicyIsOff(t *testing.T) {
	pol, err := approval.ParsePolicy("bulk>0")
	if err != nil || !pol.On() {
		t.Fatalf("bulk>0: %v %v", pol, err)
	}
	b, _, _, _ := attackBook(t, "bulk>0", 50)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-14"}, targets("CHG-1"))
	if err != nil {
		t.Fatal(err)
	}
	ex := &countingExec{}
	_, runErr := b.Run(t.Context(), p.ID, olga, ex, nil)
	if b.Policy().String() != "bulk>0" || p.State != approval.Pending || ex.calls > 0 {
		t.Fatalf("under bulk>0 the book's policy is %q, the proposal %s (needs %q), and its proposer ran it alone: %v (%v)", b.Policy(), p.State, p.Needs, ex.n, runErr)
	}
}
