package approval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"", "off", false},
		{"off", "off", false},
		{"reopen-new-attempt,redrive-force,bulk>100", "reopen-new-attempt,redrive-force,bulk>100", false},
		{" bulk>0 ", "bulk>0", false},
		{"all", "reopen-new-attempt,redrive-force,reconcile-adopt,bulk>1", false},
		{"reconcile-adopt", "reconcile-adopt", false},
		{" reconcile-adopt , bulk>3", "reconcile-adopt,bulk>3", false},
		{"reconcile", "", true},
		{"bulk>-1", "", true},
		{"bulk>many", "", true},
		{"redrive", "", true},
	} {
		p, err := approval.ParsePolicy(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && p.String() != tc.want) {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %q (bad %v)", tc.in, p, err, tc.want, tc.bad)
		}
	}
	p, _ := approval.ParsePolicy("reopen-new-attempt,redrive-force,bulk>2")
	for _, tc := range []struct {
		spec  approval.Spec
		n     int
		needs bool
	}{
		{approval.Spec{Kind: approval.Redrive}, 2, false},
		{approval.Spec{Kind: approval.Redrive}, 3, true},
		{approval.Spec{Kind: approval.Redrive, Force: true}, 1, true},
		{approval.Spec{Kind: approval.Reopen}, 1, false},
		{approval.Spec{Kind: approval.Reopen, NewAttempt: true}, 1, true},
		{approval.Spec{Kind: approval.Renotify}, 3, true},
		// reconcile-adopt is not in this policy.
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedNotRecorded}, 1, false},
	} {
		if got := p.Needs(tc.spec, tc.n) != ""; got != tc.needs {
			t.Errorf("Needs(%+v, %d) = %v, want %v", tc.spec, tc.n, got, tc.needs)
		}
	}
	ra, _ := approval.ParsePolicy("reconcile-adopt")
	all, _ := approval.ParsePolicy("all")
	for _, tc := range []struct {
		spec  approval.Spec
		needs bool
	}{
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedNotRecorded}, true},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedNotRecorded, NoticeSent: true}, true},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.FailedButPosted}, true},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.FailedButPosted, Refunded: true}, false},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.RecordedNotPosted}, false},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedTwice}, false},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.AmountMismatch}, false},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.UnknownPosting}, false},
		{approval.Spec{Kind: approval.Reopen, NewAttempt: true}, false},
		{approval.Spec{Kind: approval.Redrive, Force: true}, false},
	} {
		if got := ra.Needs(tc.spec, 1) != ""; got != tc.needs {
			t.Errorf("reconcile-adopt: Needs(%+v) = %v, want %v", tc.spec, got, tc.needs)
		}
		if tc.needs && all.Needs(tc.spec, 1) == "" {
			t.Errorf("all: Needs(%+v) = \"\", want the adoption named", tc.spec)
		}
	}
}

func TestReconcileSpecCheck(t *testing.T) {
	ok := approval.Spec{Kind: approval.Reconcile, Reason: "INC-9", ChargeIDs: []string{"CHG-1"}, Statements: []string{"/s/camt.xml"}}
	for _, tc := range []struct {
		name string
		edit func(*approval.Spec)
		bad  bool
	}{
		{"ok", func(*approval.Spec) {}, false},
		{"with kind and flags", func(s *approval.Spec) {
			s.BreakKind, s.Unverified, s.NoticeSent, s.CollectionAccount = reconcile.PostedNotRecorded, true, true, "FEES-001"
		}, false},
		{"no charge", func(s *approval.Spec) { s.ChargeIDs = nil }, true},
		{"two charges", func(s *approval.Spec) { s.ChargeIDs = []string{"CHG-1", "CHG-2"} }, true},
		{"no statement", func(s *approval.Spec) { s.Statements = nil }, true},
		{"relative statement", func(s *approval.Spec) { s.Statements = []string{"camt.xml"} }, true},
		{"no reason", func(s *approval.Spec) { s.Reason = " " }, true},
		{"bad kind", func(s *approval.Spec) { s.BreakKind = "lost" }, true},
		{"reason codes", func(s *approval.Spec) { s.Codes = []string{"debit_failed"} }, true},
		{"from without to", func(s *approval.Spec) { s.From = time.Now() }, true},
		{"statement on a redrive", func(s *approval.Spec) { s.Kind = approval.Redrive; s.ChargeIDs = nil }, true},
		{"refunded on a renotify", func(s *approval.Spec) { s.Kind, s.Statements, s.Refunded = approval.Renotify, nil, true }, true},
	} {
		s := ok
		tc.edit(&s)
		if err := s.Check(); (err != nil) != tc.bad {
			t.Errorf("%s: Check() = %v, want bad %v", tc.name, err, tc.bad)
		}
	}
}

// world: a DLQ of n declined charges (FAILED records) and two conflicts.
type world struct {
	q     *memqueue.Queue
	store *memstore.Store
	trail *audit.Trail
	path  string
	be    approval.Backend
}

// selectTargets selects spec's targets at now, want of them (any number
// when want < 0).
func (w *world) selectTargets(t *testing.T, spec approval.Spec, now time.Time, want int) []approval.Target {
	t.Helper()
	return selectTargets(t, w.be, spec, now, want)
}

// selectTargets selects spec's targets on be at now, want of them (any
// number when want < 0).
func selectTargets(t *testing.T, be approval.Backend, spec approval.Spec, now time.Time, want int) []approval.Target {
	t.Helper()
	targets, err := be.Select(t.Context(), spec, now)
	if err != nil || (want >= 0 && len(targets) != want) {
		t.Fatalf("select: %+v (%v), want %d targets", targets, err, want)
	}
	return targets
}

func newWorld(t *testing.T, n int) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{q: memqueue.New(memqueue.Options{}), store: memstore.New(), path: filepath.Join(t.TempDir(), "audit.jsonl")}
	var err error
	if w.trail, err = audit.Open(w.path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.trail.Close() })
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dl := func(body []byte, r queue.Reason) {
		if _, err := w.q.Send(ctx, body, nil); err != nil {
			t.Fatal(err)
		}
		msgs, err := w.q.Receive(ctx, 1)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %v %d", err, len(msgs))
		}
		if err := w.q.DeadLetter(ctx, msgs[0], r); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		c := charge.Charge{ID: fmt.Sprintf("CHG-%03d", i), AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
		body, err := charge.MarshalEvent(c)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := g.Claim(ctx, c.ID, "fp")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Fail(ctx, cl.Lease(), "FAILED", "debit declined: INSUFFICIENT_FUNDS"); err != nil {
			t.Fatal(err)
		}
		dl(body, queue.Reason{Code: chargehandler.Code(charge.DebitFailed), Detail: "declined: INSUFFICIENT_FUNDS"})
	}
	for i := range 2 {
		dl([]byte(fmt.Sprintf(`{"chargeId":"CHG-CONFLICT-%d","accountId":"001234567890"}`, i)), queue.Reason{Code: chargehandler.Code(charge.Conflict), Detail: "another payload"})
	}
	w.be = approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	return w
}

var (
	olga = approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	ivan = approval.Actor{Name: "ivan", Role: "operator", Via: "console"}
)

func (w *world) book(t *testing.T, policy string, o approval.Options) *approval.Book {
	t.Helper()
	p, err := approval.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	o.Policy = &p
	b, err := approval.Open(w.trail, o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (w *world) lines(t *testing.T) []audit.Entry {
	t.Helper()
	es, err := w.trail.Recent(10000, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(w.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := audit.Verify(f, w.path, audit.Report{}); err != nil {
		t.Fatalf("the trail does not verify: %v", err)
	}
	return es
}

func TestABulkRedriveNeedsASecondOperatorAndRunsInBatches(t *testing.T) {
	w := newWorld(t, 7)
	b := w.book(t, "redrive-force,bulk>3", approval.Options{Batch: 3})
	spec := approval.Spec{Kind: approval.Redrive, Codes: []string{"debit_failed"}, Reason: "INC-9: bank fixed the limit check"}
	targets := w.selectTargets(t, spec, time.Now(), -1)
	p, err := b.Propose(olga, spec, targets)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != approval.Pending || len(p.Targets) != 7 || approval.FormatTotals(p.Totals) != "INR 175.00 (7)" || !strings.Contains(p.Needs, "7 charges") {
		t.Fatalf("proposal %+v (totals %s)", p, approval.FormatTotals(p.Totals))
	}
	// Nothing runs before approval; the proposer cannot approve.
	if _, err := b.Run(t.Context(), p.ID, olga, w.be, nil); !errors.Is(err, approval.ErrState) {
		t.Fatalf("run before approval: %v", err)
	}
	for _, who := range []approval.Actor{olga, {Name: " OLGA ", Via: "console"}} {
		if _, err := b.Approve(p.ID, who); !errors.Is(err, approval.ErrSamePerson) {
			t.Fatalf("the proposer (%q) approved: %v", who.Name, err)
		}
	}
	if n, _ := w.q.Depth(t.Context()); n.Waiting != 0 {
		t.Fatalf("%d on the queue before approval", n.Waiting)
	}
	if _, err := b.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	var progress []string
	p, err = b.Run(t.Context(), p.ID, ivan, w.be, func(p approval.Proposal) {
		d, a := p.Progress()
		progress = append(progress, fmt.Sprintf("%d/%d", d, a))
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.State != approval.Done || p.Counts()["moved"] != 7 || strings.Join(progress, " ") != "3/7 6/7 7/7" {
		t.Fatalf("after the run: %s %v progress %v", p.State, p.Counts(), progress)
	}
	// The conflicts stayed: they were never part of the proposal.
	if d, _ := w.q.Depth(t.Context()); d.Waiting != 7 || d.DLQ != 2 {
		t.Fatalf("%d back on the queue, %d on the DLQ; want 7 and the 2 conflicts", d.Waiting, d.DLQ)
	}
	var actions []string
	for _, e := range w.lines(t) {
		actions = append([]string{e.Action + ":" + e.Result}, actions...)
	}
	want := "propose:pending refused:refused approve:refused approve:refused approve:approved execute:running batch:batch 1 batch:batch 2 batch:batch 3 done:done"
	if got := strings.Join(actions, " "); !strings.Contains(got, "approve:approved execute:running batch:batch 1 batch:batch 2 batch:batch 3 done:done") || !strings.HasPrefix(got, "propose:pending") {
		t.Fatalf("audit lines %s, want like %s", got, want)
	}
}

// stopAfter is an executor that stops the run (its context) after n batches.
type stopAfter struct {
	approval.Executor
	n      int
	cancel func()
	seen   map[string]int
}

func (s *stopAfter) Execute(ctx context.Context, p approval.Proposal, batch []approval.Target, who approval.Actor) map[string]approval.Outcome {
	for _, t := range batch {
		s.seen[t.Key()]++
	}
	out := s.Executor.Execute(ctx, p, batch, who)
	if s.n--; s.n == 0 {
		s.cancel()
	}
	return out
}

func TestAStoppedRunIsResumedWhereItStoppedAndNeverActsTwice(t *testing.T) {
	w := newWorld(t, 10)
	now := time.Now()
	clock := func() time.Time { return now }
	b := w.book(t, "off", approval.Options{Batch: 4, Now: clock})
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-10: salary day"}
	targets := w.selectTargets(t, spec, now, 10)
	p, err := b.Propose(olga, spec, targets)
	if err != nil || p.State != approval.Approved {
		t.Fatalf("no approval needed under the policy off: %+v %v", p.State, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ex := &stopAfter{Executor: w.be, n: 1, cancel: cancel, seen: map[string]int{}}
	p, err = b.Run(ctx, p.ID, olga, ex, nil)
	if err == nil || p.State != approval.Running || len(p.Remaining()) != 6 {
		t.Fatalf("stopped run: %v, state %s, %d to go", err, p.State, len(p.Remaining()))
	}
	// The stopped run let go of it: the next run resumes at once.
	ex.n = -1
	p, err = b.Run(t.Context(), p.ID, olga, ex, nil)
	if err != nil || p.State != approval.Done || p.Counts()["reopened"] != 10 {
		t.Fatalf("resumed: %v %s %v", err, p.State, p.Counts())
	}
	for k, n := range ex.seen {
		if n != 1 {
			t.Fatalf("%s acted on %d times", k, n)
		}
	}
	// Every record is reopened under the next generation, its entry back
	// on the queue.
	for _, tg := range targets {
		rec, err := w.store.Get(t.Context(), tg.ChargeID, time.Now())
		if err != nil || rec.Generation != 2 || rec.State != driver.StateInProgress {
			t.Fatalf("%s: %+v %v", tg.ChargeID, rec, err)
		}
	}
	if d, _ := w.q.Depth(t.Context()); d.Waiting != 10 {
		t.Fatalf("%d on the queue, want 10", d.Waiting)
	}
	var resumed bool
	for _, e := range w.lines(t) {
		resumed = resumed || e.Action == "resume"
	}
	if !resumed {
		t.Fatal("no resume line in the audit trail")
	}
}

func TestProposalsExpireAndRejectedOnesNeverRun(t *testing.T) {
	w := newWorld(t, 3)
	now := time.Now()
	b := w.book(t, "bulk>0", approval.Options{TTL: time.Hour, Now: func() time.Time { return now }})
	spec := approval.Spec{Kind: approval.Redrive, Reason: "INC-11"}
	targets := w.selectTargets(t, spec, now, -1)
	p1, _ := b.Propose(olga, spec, targets)
	p2, _ := b.Propose(olga, spec, targets)
	if _, err := b.Reject(p2.ID, ivan, ""); err == nil {
		t.Fatal("a rejection without a reason")
	}
	if _, err := b.Reject(p2.ID, ivan, "wrong window"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Approve(p2.ID, ivan); !errors.Is(err, approval.ErrState) {
		t.Fatalf("approve after reject: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := b.Approve(p1.ID, ivan); !errors.Is(err, approval.ErrState) {
		t.Fatalf("approve after expiry: %v", err)
	}
	ps, err := b.List()
	if err != nil || len(ps) != 2 {
		t.Fatal(err)
	}
	states := map[string]approval.State{}
	for _, p := range ps {
		states[p.ID] = p.State
	}
	if states[p1.ID] != approval.Expired || states[p2.ID] != approval.Rejected {
		t.Fatalf("states %v", states)
	}
	if d, _ := w.q.Depth(t.Context()); d.Waiting != 0 {
		t.Fatalf("%d moved", d.Waiting)
	}
	if _, err := b.Get("P-../../etc"); !errors.Is(err, approval.ErrNotFound) {
		t.Fatalf("a path as an id: %v", err)
	}
}

func TestSelectSaysWhatMatchesNothing(t *testing.T) {
	w := newWorld(t, 2)
	_, err := w.be.Select(t.Context(), approval.Spec{Kind: approval.Redrive, Reason: "x", ChargeIDs: []string{"CHG-000", "CHG-NOPE"}}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "CHG-NOPE") || strings.Contains(err.Error(), "CHG-000,") {
		t.Fatalf("select: %v", err)
	}
	if _, err := w.be.Select(t.Context(), approval.Spec{Kind: approval.Redrive}, time.Now()); err == nil {
		t.Fatal("a proposal without a reason")
	}
}

// reconcile-adopt asks a second operator for every resolution that
// records money as collected, whatever the break's kind: a posted_twice
// break of a record still open to a debit collects one posting.
func TestReconcileAdoptCoversEveryCollection(t *testing.T) {
	pol, err := approval.ParsePolicy("reconcile-adopt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec  approval.Spec
		needs bool
	}{
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedTwice, Collects: true}, true},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedTwice}, false},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.PostedNotRecorded}, true},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.FailedButPosted, Refunded: true}, false},
		{approval.Spec{Kind: approval.Reconcile, BreakKind: reconcile.RecordedNotPosted}, false},
	} {
		if got := pol.Needs(tc.spec, 1) != ""; got != tc.needs {
			t.Errorf("%s (collects %v, refunded %v): needs approval %v, want %v", tc.spec.BreakKind, tc.spec.Collects, tc.spec.Refunded, got, tc.needs)
		}
	}
}

// An expired proposal brought back by editing its file (its expiry moved
// on, its state set back to pending) is not approved nor run: the expiry
// is vouched for by the propose line, and a proposal the trail says
// expired or was rejected stays so whatever its file says.
func TestAnExpiredProposalEditedBackToLifeIsRefused(t *testing.T) {
	t.Run("expiry moved on before anyone saw it expire", func(t *testing.T) {
		b, _, path, clk := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, targets("CHG-A", "CHG-B"))
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(25 * time.Hour)
		editProposal(t, path, p.ID, func(m map[string]any) {
			m["expires"] = clk.Now().Add(time.Hour).Format(time.RFC3339Nano)
		})
		if _, err := b.Approve(p.ID, ivan); !errors.Is(err, approval.ErrTampered) {
			t.Fatalf("an expired proposal whose file was given a later expiry was approved: %v", err)
		}
		ex := &countingExec{}
		if _, err := b.Run(t.Context(), p.ID, ivan, ex, nil); err == nil || ex.calls > 0 {
			t.Fatalf("run: %v, acted %v", err, ex.n)
		}
	})
	t.Run("expired, then state and expiry edited", func(t *testing.T) {
		b, _, path, clk := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-8"}, targets("CHG-A"))
		if err != nil {
			t.Fatal(err)
		}
		clk.Add(25 * time.Hour)
		if got, err := b.Get(p.ID); err != nil || got.State != approval.Expired {
			t.Fatalf("%v %s", err, got.State)
		}
		editProposal(t, path, p.ID, func(m map[string]any) {
			m["state"] = "pending"
			m["expires"] = clk.Now().Add(time.Hour).Format(time.RFC3339Nano)
		})
		if _, err := b.Approve(p.ID, ivan); err == nil {
			t.Fatal("a proposal the trail says expired was approved after its file was edited")
		}
	})
	t.Run("rejected, then state edited", func(t *testing.T) {
		b, _, path, _ := attackBook(t, "all", 50)
		p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-9"}, targets("CHG-A"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Reject(p.ID, ivan, "not now"); err != nil {
			t.Fatal(err)
		}
		editProposal(t, path, p.ID, func(m map[string]any) { m["state"] = "pending"; delete(m, "decider") })
		if _, err := b.Approve(p.ID, ivan); err == nil {
			t.Fatal("a proposal the trail says was rejected was approved after its file was edited")
		}
	})
}

// Two approvers at once: exactly one approves; the other is told it is
// approved already.
func TestTwoApproversRacing(t *testing.T) {
	b, _, _, _ := attackBook(t, "all", 50)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-10"}, targets("CHG-A", "CHG-B"))
	if err != nil {
		t.Fatal(err)
	}
	anna := approval.Actor{Name: "anna", Role: "operator", Via: "cli"}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, who := range []approval.Actor{ivan, anna} {
		wg.Go(func() { _, errs[i] = b.Approve(p.ID, who) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else if !errors.Is(err, approval.ErrState) {
			t.Fatalf("the loser: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d approvals succeeded (%v)", ok, errs)
	}
}

// A renotify proposal naming a charge with no record says so plainly
// (it said "not CHG-NOPE (absent )").
func TestARenotifyProposalOfNoRecordSaysSo(t *testing.T) {
	w := newWorld(t, 1)
	_, err := w.be.Select(t.Context(), approval.Spec{Kind: approval.Renotify, Reason: "x", ChargeIDs: []string{"CHG-NOPE"}}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "CHG-NOPE (no record)") {
		t.Fatalf("select: %v", err)
	}
}

// The approver decides on what a proposal shows: its count, sample and
// total by currency (approvals show, approve's line, the console's page).
// The digest its propose line vouches for covers the targets, not the
// totals kept beside them in the file: the proposer could make 3 × INR
// 25.00 read "INR 0.01" and have it approved as it was — the run then
// acting on every target, each at its own amount. What is shown is
// what the targets sum to, whatever the file says.
func TestAttack53MovedTotalsEditedInTheFileAreNotWhatIsShown(t *testing.T) {
	b, _, path, _ := attackBook(t, "all", 50)
	p, err := b.Propose(olga, approval.Spec{Kind: approval.Redrive, Reason: "INC-7"}, targets("CHG-A", "CHG-B", "CHG-C"))
	if err != nil {
		t.Fatal(err)
	}
	want := approval.FormatTotals(p.Totals)
	editProposal(t, path, p.ID, func(m map[string]any) {
		m["totals"] = []map[string]any{{"currency": "INR", "minor": 1, "count": 3}}
	})
	got, err := b.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var shown bytes.Buffer
	approval.Print(&shown, got, 10)
	if approval.FormatTotals(got.Totals) != want || !strings.Contains(shown.String(), want) {
		t.Fatalf("shown %q (%s), want the targets' %s", approval.FormatTotals(got.Totals), shown.String(), want)
	}
	a, err := b.Approve(p.ID, ivan)
	if err != nil || approval.FormatTotals(a.Totals) != want {
		t.Fatalf("approved %s, %v; want the targets' %s", approval.FormatTotals(a.Totals), err, want)
	}
	if ps, err := b.List(); err != nil || len(ps) != 1 || approval.FormatTotals(ps[0].Totals) != want {
		t.Fatalf("listed %v, %v", ps, err)
	}
}

// Switching a token installation to proxy sign-in retires the command
// line's keys (a retire-tokens line): people are named by the identity
// provider from then on — "olga@bank.example", where the token file said
// "olga". A proposal olga made before the switch, still pending, was
// approved after it by olga herself under her new name: names are
// compared, and the two are not the same. An approval across the switch
// compares names of two sign-ins, so it is refused: the proposal is made
// again under the names of now.
func TestAttack53MovedApprovalAcrossASignInSwitchIsRefused(t *testing.T) {
	for _, switchLine := range []string{"retire-tokens", "sign-in"} {
		t.Run(switchLine, func(t *testing.T) { approvalAcrossASwitch(t, switchLine) })
	}
}

func approvalAcrossASwitch(t *testing.T, switchLine string) {
	w := newWorld(t, 2)
	o := w.olgaProposesAReopen(t)
	open, consoleKey, targets, p := o.open, o.consoleKey, o.targets, o.p
	// The console's start under proxy sign-in.
	consoles := open(consoleKey, audit.ConsoleSigner)
	ct, err := audit.Open(w.path)
	if err != nil {
		t.Fatal(err)
	}
	ct.Sign, ct.RequireSign = &audit.Signer{Name: audit.ConsoleSigner, Key: consoleKey}, true
	if _, err := ct.Append(audit.Entry{Operator: "system", Via: "console start", Action: switchLine, Result: "retired",
		Detail: "sign-in is by the proxy now"}); err != nil {
		t.Fatal(err)
	}
	ct.Close()
	olgaNow := approval.Actor{Name: "olga@bank.example", Role: "operator", Via: "console"}
	if a, err := consoles.Approve(p.ID, olgaNow); err == nil {
		_, rerr := consoles.Run(t.Context(), p.ID, olgaNow, w.be, nil)
		rec, _ := w.store.Get(t.Context(), targets[0].ChargeID, time.Now())
		t.Fatalf("olga's token-era proposal approved by her proxy name: %s; run: %v; %s generation %d", a.State, rerr, rec.State, rec.Generation)
	}
}

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

// dieAfterExecute is a run that dies after the executor acted on its
// batch and before Book.Run saved the outcomes: the real Backend.Execute,
// then a panic (the process gone), which Run does not recover.
type dieAfterExecute struct{ be approval.Backend }

type died struct{}

func (d dieAfterExecute) Execute(ctx context.Context, p approval.Proposal, batch []approval.Target, who approval.Actor) map[string]approval.Outcome {
	d.be.Execute(ctx, p, batch, who)
	panic(died{})
}

// chargeWorld is one charge, delivered through the real charge.Service
// over a memstore, a memqueue (with its DLQ) and a bank that declines
// every debit of its account.
type chargeWorld struct {
	q      *memqueue.Queue
	store  *memstore.Store
	ledger *corebanksim.Ledger
	svc    *charge.Service
}

func newChargeWorld(t *testing.T) *chargeWorld {
	t.Helper()
	w := &chargeWorld{q: memqueue.New(memqueue.Options{DLQ: memqueue.New(memqueue.Options{})}), store: memstore.New(),
		ledger: corebanksim.NewLedger(corebanksim.Faults{DeclineAccounts: map[string]string{"001234567890": "INSUFFICIENT_FUNDS"}})}
	g, err := idempotency.NewGuard(w.store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if w.svc, err = charge.NewService(charge.Options{Guard: g, Debiter: w.ledger, Notifier: notifyNothing{}, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	return w
}

type notifyNothing struct{}

func (notifyNothing) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	return nil
}

// deliver receives every message on the queue and settles it as serve
// does (chargehandler.Decide): ack, or dead-letter with the outcome's code.
func (w *chargeWorld) deliver(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	for w.q.Len() > 0 {
		msgs, err := w.q.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			c, err := charge.ParseEvent(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			dec := chargehandler.Decide(w.svc.Process(ctx, c, nil), 0)
			switch dec.Action {
			case consumer.Ack:
				err = w.q.Ack(ctx, []queue.Message{m})
			case consumer.DeadLetter:
				err = w.q.DeadLetter(ctx, m, dec.Reason)
			default:
				t.Fatalf("%s: %+v", c.ID, dec)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An approved reopen --new-attempt whose run dies after the reopen and its
// redrive, before the outcome is saved; meanwhile the redriven message is
// delivered, generation 2 is debited and declined (FAILED again). The
// resumed run must not reopen it again: one approval, one re-presentment.
func TestAResumedReopenDoesNotReopenARecordChangedSince(t *testing.T) {
	ctx := t.Context()
	w := newChargeWorld(t)
	c := charge.Charge{ID: "CHG-RESUME", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
	body, err := charge.MarshalEvent(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.q.Send(ctx, body, nil); err != nil {
		t.Fatal(err)
	}
	w.deliver(t) // generation 1: declined, FAILED, dead-lettered
	if rec, err := w.store.Get(ctx, c.ID, time.Now()); err != nil || rec.State != driver.StateFailed {
		t.Fatalf("generation 1: %+v %v", rec, err)
	}

	path := filepath.Join(t.TempDir(), "audit.jsonl")
	trail, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trail.Close() })
	pol, _ := approval.ParsePolicy("reopen-new-attempt")
	book, err := approval.Open(trail, approval.Options{Policy: &pol})
	if err != nil {
		t.Fatal(err)
	}
	be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-50: salary credited", ChargeIDs: []string{c.ID}}
	targets := selectTargets(t, be, spec, time.Now(), 1)
	p, err := book.Propose(olga, spec, targets)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := book.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}

	// The run reopens (generation 2) and redrives, then dies before saving.
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(died); !ok {
					panic(r)
				}
			}
		}()
		_, err := book.Run(ctx, p.ID, olga, dieAfterExecute{be}, nil)
		t.Fatalf("the run was to die: %v", err)
	}()
	// Meanwhile the redriven message is delivered: generation 2 declined.
	w.deliver(t)
	if rec, err := w.store.Get(ctx, c.ID, time.Now()); err != nil || rec.State != driver.StateFailed || rec.Generation != 2 {
		t.Fatalf("generation 2: %+v %v", rec, err)
	}

	// The run is resumed; then an operator's plain redrive of the DLQ
	// and the deliveries of whatever is on the queue.
	p, err = book.Run(ctx, p.ID, olga, be, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.deliver(t)
	if _, err := w.q.Redrive(ctx, operate.RedriveAt(time.Now(), idempotency.DefaultRetention)); err != nil {
		t.Fatal(err)
	}
	w.deliver(t)

	if n := w.ledger.Calls(c.ID + "~2"); n != 1 {
		t.Errorf("%d debit requests under %s~2, want 1", n, c.ID)
	}
	if n := w.ledger.Calls(c.ID + "~3"); n != 0 {
		t.Errorf("%d debit request(s) under %s~3: one approval re-presented the charge twice", n, c.ID)
	}
	rec, err := w.store.Get(ctx, c.ID, time.Now())
	if err != nil || rec.State != driver.StateFailed || rec.Generation != 2 {
		t.Errorf("the record is %s at generation %d (%v), want FAILED at generation 2", rec.State, rec.Generation, err)
	}
	o := p.Outcomes[targets[0].Key()]
	if o.Result != "skipped" || !strings.Contains(o.Why, "changed since the proposal (state FAILED, generation 2)") {
		t.Errorf("the target's outcome is %+v, want skipped: changed since the proposal", o)
	}
	es, err := trail.Recent(1000, audit.Filter{Proposal: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Action == "batch" && len(e.Charges) > 0 {
			t.Errorf("an audit line says the approval reopened %v again: %+v", e.Charges, e)
		}
	}
}

// oneToReopen is a world of one FAILED charge, a book under policy and a
// spec (INC-50) that reopens it with a new attempt, and its one target.
func oneToReopen(t *testing.T, policy string) (*world, *approval.Book, approval.Spec, []approval.Target) {
	t.Helper()
	w := newWorld(t, 1)
	book := w.book(t, policy, approval.Options{})
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-50"}
	return w, book, spec, w.selectTargets(t, spec, time.Now(), 1)
}

// A run resumed after one that died between its reopen and saving the
// outcome, with nothing delivered meanwhile, recognises its own reopen
// (the record under the proposal's token) and only redrives.
func TestAResumedReopenFinishesItsOwnReopen(t *testing.T) {
	ctx := t.Context()
	w, book, spec, targets := oneToReopen(t, "reopen-new-attempt")
	p, _ := book.Propose(olga, spec, targets)
	if _, err := book.Approve(p.ID, ivan); err != nil {
		t.Fatal(err)
	}
	// The earlier run reopened, and died before its redrive.
	g, _ := idempotency.NewGuard(w.store, idempotency.Options{})
	if _, err := g.Reopen(ctx, targets[0].ChargeID, "INC-50", idempotency.ReopenOptions{NewGeneration: true,
		PrevToken: targets[0].RecordToken, Token: approval.ReopenToken(p.ID, targets[0])}); err != nil {
		t.Fatal(err)
	}
	p, err := book.Run(ctx, p.ID, olga, w.be, nil)
	if err != nil || p.Counts()["reopened"] != 1 {
		t.Fatalf("resumed: %v %v %v", err, p.Counts(), p.Outcomes)
	}
	// Its outcome says who reopened it (issue 54 item 6): not this run.
	if o := p.Outcomes[targets[0].Key()]; !strings.Contains(o.Why, "reopened by an earlier run of this proposal") {
		t.Errorf("the outcome of a reopen this run only finished: %+v", o)
	}
	rec, _ := w.store.Get(ctx, targets[0].ChargeID, time.Now())
	if rec.Generation != 2 || rec.Reopens != 1 {
		t.Fatalf("reopened twice, or not at all: generation %d, %d reopen(s)", rec.Generation, rec.Reopens)
	}
	if d, _ := w.q.Depth(ctx); d.Waiting != 1 {
		t.Fatalf("%d on the queue, want 1", d.Waiting)
	}
}

// A Reopen proposal written before the record was frozen is not acted on.
func TestAnOldReopenProposalIsNotActedOn(t *testing.T) {
	ctx := t.Context()
	w, book, spec, targets := oneToReopen(t, "off")
	old := targets[0]
	old.RecordToken, old.RecordGeneration, old.RecordState = "", 0, ""
	p, _ := book.Propose(olga, spec, []approval.Target{old})
	p, err := book.Run(ctx, p.ID, olga, w.be, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := p.Outcomes[old.Key()]; o.Result != "skipped" || !strings.Contains(o.Why, "propose it again") {
		t.Fatalf("an old proposal's target: %+v", o)
	}
	if rec, _ := w.store.Get(ctx, old.ChargeID, time.Now()); rec.State != driver.StateFailed {
		t.Fatalf("reopened blindly: %+v", rec)
	}
}

// A reopen of a charge without a FAILED record is not proposed.
func TestAReopenOfNoFailedRecordIsNotProposed(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, 1)
	// A declined charge's entry whose record is gone (purged, past its
	// retention).
	body, err := charge.MarshalEvent(charge.Charge{ID: "CHG-NOREC", AccountID: "001234567890", Amount: charge.Money{Minor: 100, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.q.Send(ctx, body, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := w.q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatal(err)
	}
	if err := w.q.DeadLetter(ctx, msgs[0], queue.Reason{Code: chargehandler.Code(charge.DebitFailed)}); err != nil {
		t.Fatal(err)
	}
	_, err = w.be.Select(ctx, approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-50"}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "CHG-NOREC (no record)") {
		t.Fatalf("select: %v", err)
	}
}

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

const (
	closedAccount = "009900000001" // declined ACCOUNT_CLOSED: a hard decline
	poorAccount   = "009900000002" // declined INSUFFICIENT_FUNDS
	closedCharge  = "CHG-CLOSED"
	poorCharge    = "CHG-POOR"
)

// declinedWorld is two charges delivered through the real charge.Service
// and dead-lettered: one declined ACCOUNT_CLOSED (spelled as a bank might),
// one INSUFFICIENT_FUNDS; then the bank would debit both (salary day, and
// a bank that would take a debit of a closed account all the same).
func declinedWorld(t *testing.T) *chargeWorld {
	t.Helper()
	w := newChargeWorld(t)
	w.ledger.SetFaults(corebanksim.Faults{DeclineAccounts: map[string]string{closedAccount: "Account-Closed", poorAccount: "INSUFFICIENT_FUNDS"}})
	for id, acct := range map[string]string{closedCharge: closedAccount, poorCharge: poorAccount} {
		body, err := charge.MarshalEvent(charge.Charge{ID: id, AccountID: acct, Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.q.Send(t.Context(), body, nil); err != nil {
			t.Fatal(err)
		}
	}
	w.deliver(t)
	for _, id := range []string{closedCharge, poorCharge} {
		if rec, err := w.store.Get(t.Context(), id, time.Now()); err != nil || rec.State != driver.StateFailed {
			t.Fatalf("%s: %+v %v", id, rec, err)
		}
	}
	w.ledger.SetFaults(corebanksim.Faults{})
	return w
}

func bookOf(t *testing.T, policy string) *approval.Book {
	t.Helper()
	trail, err := audit.Open(t.TempDir() + "/audit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trail.Close() })
	p, err := approval.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	b, err := approval.Open(trail, approval.Options{Policy: &p})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func targetOf(ts []approval.Target, id string) (approval.Target, bool) {
	for _, t := range ts {
		if t.ChargeID == id {
			return t, true
		}
	}
	return approval.Target{}, false
}

// A bulk reopen with a new attempt of the DLQ's debit_failed entries,
// one of them declined ACCOUNT_CLOSED. Without represent-hard-decline the
// closed account is held back at the proposal (with its code, never a
// target) and gets no debit request after the approval's run; with it,
// the charge is a target marked hard-declined with its code, needs
// another operator's approval, and only then is presented again.
func TestAHardDeclineInABulkReopenIsHeldBackUnlessThePolicyRepresentsIt(t *testing.T) {
	for _, tc := range []struct {
		policy           string
		closedTarget     bool
		closedDebitsAt2  int
		wantNeeds, print []string
	}{
		{policy: "reopen-new-attempt", closedTarget: false, closedDebitsAt2: 0,
			wantNeeds: []string{"a reopen with a new attempt"},
			print:     []string{"touches:  1 charge(s), INR 25.00 (1)", "held back: 1 charge(s)", closedCharge, "********0001", "Account-Closed HARD DECLINE (the account is closed)", "never presented again"}},
		{policy: "represent-hard-decline", closedTarget: true, closedDebitsAt2: 1,
			wantNeeds: []string{"hard-declined charge(s) (" + closedCharge + " Account-Closed)"},
			print:     []string{"touches:  2 charge(s), INR 50.00 (2)", "********0001", "Account-Closed HARD DECLINE (the account is closed)", "INSUFFICIENT_FUNDS", "state:    pending"}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			ctx := t.Context()
			w := declinedWorld(t)
			book := bookOf(t, tc.policy)
			be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
			spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-51: salary credited"}
			targets := selectTargets(t, be, spec, time.Now(), 2)
			p, err := book.Propose(olga, spec, targets)
			if err != nil {
				t.Fatal(err)
			}
			ct, isTarget := targetOf(p.Targets, closedCharge)
			if isTarget != tc.closedTarget {
				t.Fatalf("the closed account is a target: %v, want %v (targets %+v, held %+v)", isTarget, tc.closedTarget, p.Targets, p.Held)
			}
			if isTarget && (!ct.HardDecline || ct.DeclineCode != "Account-Closed") {
				t.Fatalf("the hard decline is not marked with its code on the proposal: %+v", ct)
			}
			if !isTarget && (len(p.Held) != 1 || p.Held[0].ChargeID != closedCharge || p.Held[0].DeclineCode != "Account-Closed" || !p.Held[0].HardDecline) {
				t.Fatalf("held back: %+v", p.Held)
			}
			if p.State != approval.Pending {
				t.Fatalf("state %s, want pending (needs %q)", p.State, p.Needs)
			}
			for _, want := range tc.wantNeeds {
				if !strings.Contains(p.Needs, want) {
					t.Fatalf("needs %q, want %q in it", p.Needs, want)
				}
			}
			var out bytes.Buffer
			approval.Print(&out, p, 20)
			for _, want := range tc.print {
				if !strings.Contains(out.String(), want) {
					t.Fatalf("the proposal as printed lacks %q:\n%s", want, out.String())
				}
			}
			if strings.Contains(out.String(), closedAccount) {
				t.Fatalf("an account in clear:\n%s", out.String())
			}
			// The proposer cannot approve it; another operator does.
			if _, err := book.Approve(p.ID, olga); err == nil {
				t.Fatal("the proposer approved her own proposal")
			}
			if _, err := book.Approve(p.ID, ivan); err != nil {
				t.Fatal(err)
			}
			if p, err = book.Run(ctx, p.ID, ivan, be, nil); err != nil {
				t.Fatal(err)
			}
			w.deliver(t)
			if n := w.ledger.Calls(poorCharge + "~2"); n != 1 {
				t.Errorf("%d debit requests under %s~2, want 1", n, poorCharge)
			}
			if n := w.ledger.Calls(closedCharge + "~2"); n != tc.closedDebitsAt2 {
				t.Errorf("%d debit requests of the closed account under %s~2, want %d", n, closedCharge, tc.closedDebitsAt2)
			}
			if n := w.ledger.Calls(closedCharge); n != 1 {
				t.Errorf("%d debit requests under %s, want the first one only", n, closedCharge)
			}
		})
	}
}

// The run checks again: a proposal that froze a hard decline as a plain
// target (one made before proposals held them back, or a target the
// approver was not shown as hard-declined) holds it back at its run, with
// the code, and the closed account gets no debit request — under either
// policy.
func TestARunHoldsBackAHardDeclineTheApproverWasNotShown(t *testing.T) {
	for _, tc := range []struct{ policy, why string }{
		{"reopen-new-attempt", "has no represent-hard-decline"},
		{"reopen-new-attempt,represent-hard-decline", "the approver was not shown"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			ctx := t.Context()
			w := declinedWorld(t)
			book := bookOf(t, tc.policy)
			be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
			spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-51", ChargeIDs: []string{closedCharge}}
			targets := selectTargets(t, be, spec, time.Now(), 1)
			// As main froze it before: the record's token, no decline code.
			targets[0].DeclineCode, targets[0].HardDecline = "", false
			p, err := book.Propose(olga, spec, targets)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := book.Approve(p.ID, ivan); err != nil {
				t.Fatal(err)
			}
			if p, err = book.Run(ctx, p.ID, ivan, be, nil); err != nil {
				t.Fatal(err)
			}
			o := p.Outcomes[targets[0].Key()]
			if o.Result != "held back" || !strings.Contains(o.Why, "Account-Closed") || !strings.Contains(o.Why, tc.why) {
				t.Fatalf("outcome %+v, want held back with the code and %q", o, tc.why)
			}
			w.deliver(t)
			if n := w.ledger.Calls(closedCharge + "~2"); n != 0 {
				t.Fatalf("%d debit requests of the closed account under ~2", n)
			}
			if rec, _ := w.store.Get(ctx, closedCharge, time.Now()); rec.State != driver.StateFailed || rec.Generation > 1 {
				t.Fatalf("the closed account's record was reopened: %+v", rec)
			}
		})
	}
}

// An executor handed a proposal by any other path than Book.Run (which
// says what the kept policy is) refuses a hard decline.
func TestExecuteOutsideARunRefusesAHardDecline(t *testing.T) {
	ctx := t.Context()
	w := declinedWorld(t)
	be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "INC-51", ChargeIDs: []string{closedCharge}}
	targets, err := be.Select(ctx, spec, time.Now())
	if err != nil || len(targets) != 1 || !targets[0].HardDecline {
		t.Fatalf("select: %+v %v", targets, err)
	}
	outs := be.Execute(ctx, approval.Proposal{ID: "P-0000000001", Spec: spec, Targets: targets}, targets, ivan)
	if o := outs[targets[0].Key()]; o.Result != "held back" {
		t.Fatalf("outcome %+v", o)
	}
	if rec, _ := w.store.Get(ctx, closedCharge, time.Now()); rec.Generation > 1 {
		t.Fatalf("reopened: %+v", rec)
	}
}

// --decline-code keeps the charges declined with one of its codes, as a
// bank spells them or not; a charge named by id that it drops is said.
func TestADeclineCodeFilterKeepsOnlyThoseCodes(t *testing.T) {
	ctx := t.Context()
	w := declinedWorld(t)
	be := approval.Backend{Queue: w.q, Store: w.store, Retention: idempotency.DefaultRetention}
	for _, tc := range []struct {
		kind  approval.Kind
		codes []string
		want  []string
	}{
		{approval.Reopen, []string{"INSUFFICIENT_FUNDS"}, []string{poorCharge}},
		{approval.Reopen, []string{"insufficient funds"}, []string{poorCharge}},
		{approval.Reopen, []string{"ACCOUNT_CLOSED"}, []string{closedCharge}},
		{approval.Redrive, []string{"insufficient-funds", "NO_MANDATE"}, []string{poorCharge}},
		{approval.Reopen, nil, []string{closedCharge, poorCharge}},
	} {
		spec := approval.Spec{Kind: tc.kind, NewAttempt: tc.kind == approval.Reopen, Reason: "INC-51", DeclineCodes: tc.codes}
		ts, err := be.Select(ctx, spec, time.Now())
		if err != nil {
			t.Fatalf("%s %v: %v", tc.kind, tc.codes, err)
		}
		var got []string
		for _, x := range ts {
			got = append(got, x.ChargeID)
			if x.DeclineCode == "" {
				t.Errorf("%s %v: %s without its decline code", tc.kind, tc.codes, x.ChargeID)
			}
		}
		slices.Sort(got)
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s %v: %v, want %v", tc.kind, tc.codes, got, tc.want)
		}
	}
	_, err := be.Select(ctx, approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "x", DeclineCodes: []string{"INSUFFICIENT_FUNDS"},
		ChargeIDs: []string{closedCharge, poorCharge}}, time.Now())
	if err == nil || !strings.Contains(err.Error(), closedCharge+" (Account-Closed)") {
		t.Fatalf("a named charge the filter drops: %v", err)
	}
	for _, bad := range []approval.Spec{
		{Kind: approval.Renotify, Reason: "x", DeclineCodes: []string{"INSUFFICIENT_FUNDS"}},
		{Kind: approval.Reopen, Reason: "x", DeclineCodes: []string{" - "}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestThePolicyTermRepresentHardDecline(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		term    bool
	}{
		{"represent-hard-decline", "represent-hard-decline", true},
		{"reopen-new-attempt, represent-hard-decline ,bulk>3", "reopen-new-attempt,bulk>3,represent-hard-decline", true},
		{"all", "reopen-new-attempt,redrive-force,reconcile-adopt,bulk>1", false},
		{"reopen-new-attempt", "reopen-new-attempt", false},
	} {
		p, err := approval.ParsePolicy(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if p.RepresentHardDecline != tc.term || p.String() != tc.out {
			t.Errorf("%q: term %v, string %q; want %v, %q", tc.in, p.RepresentHardDecline, p.String(), tc.term, tc.out)
		}
		if back, err := approval.ParsePolicy(p.String()); err != nil || back != p {
			t.Errorf("%q: does not read back: %+v %v", p.String(), back, err)
		}
		if !p.On() {
			t.Errorf("%q: not on", tc.in)
		}
	}
	if _, err := approval.ParsePolicy("represent-hard-declines"); err == nil {
		t.Error("a misspelt term is read")
	}
}
