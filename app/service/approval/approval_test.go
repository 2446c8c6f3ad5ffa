package approval_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/service/approval"
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
