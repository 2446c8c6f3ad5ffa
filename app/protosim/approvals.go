package protosim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
)

// Four-eyes in the run: olga proposes a bulk reopen --new-attempt of the
// FAILED charges, ivan approves and runs it (approval.Book over an audit
// trail in a directory of the run's, approval.Backend over the gated
// store and queue). A run that dies is run again — Book.Run resumes — as
// an operator would after the process died.

var (
	olga = approval.Actor{Name: "olga", Role: "operator", Via: "cli"}
	ivan = approval.Actor{Name: "ivan", Role: "operator", Via: "cli"}
)

// ops is the queue as an operator's tools reach it (approval.Backend):
// the redrive passes the gate.
type ops struct {
	s *Sim
	q *memqueue.Queue
}

var _ queue.Operator = ops{}

func (o ops) Depth(ctx context.Context) (queue.Depth, error) { return o.q.Depth(ctx) }
func (o ops) Ping(ctx context.Context) error                 { return o.q.Ping(ctx) }
func (o ops) Redrive(ctx context.Context, r queue.RedriveOptions) (queue.RedriveReport, error) {
	if !r.DryRun {
		if _, err := o.s.gate(ctx, "queue.Redrive"); err != nil {
			return queue.RedriveReport{}, err
		}
	}
	defer o.s.nudge()
	return o.q.Redrive(ctx, r)
}

// approvalsScript proposes, approves and runs one bulk reopen.
func (s *Sim) approvalsScript(dir string) (*opScript, error) {
	trail, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { trail.Close() })
	// Half the seeds' installations present a hard decline again when
	// another operator approves it with its code shown
	// (represent-hard-decline); the other half never do.
	policy := "reopen-new-attempt"
	if s.cfg.Seed%2 == 1 {
		policy += ",represent-hard-decline"
	}
	pol, err := approval.ParsePolicy(policy)
	if err != nil {
		return nil, err
	}
	book, err := approval.Open(trail, approval.Options{Policy: &pol, Now: s.clock})
	if err != nil {
		return nil, err
	}
	s.book, s.trailPath = book, trail.Path()
	o := &opScript{name: "approvals"}
	o.tasks = append(o.tasks, &opTask{at: s.now.Add(time.Duration(s.rng.IntN(60*60)) * time.Minute), what: "approvals propose+approve+run", run: s.bulkReopen})
	return o, nil
}

// executor is the approval.Backend the run executes through, with a gate
// after each batch's actions and before Book.Run saves their outcomes:
// a process may die there (the save is a write to the disk like any
// other call), and the resumed run finds the batch acted on and not saved.
type executor struct {
	s  *Sim
	be approval.Backend
}

func (e executor) Execute(ctx context.Context, p approval.Proposal, batch []approval.Target, who approval.Actor) map[string]approval.Outcome {
	var out map[string]approval.Outcome
	if e.s.cfg.Plant == PlantUnfencedApproval {
		out = e.s.unfencedReopen(ctx, p, batch)
	} else {
		out = e.be.Execute(ctx, p, batch, who)
	}
	_, _ = e.s.gate(ctx, "approvals.save "+p.ID)
	return out
}

func (s *Sim) backend() approval.Backend {
	return approval.Backend{Queue: ops{s, s.q}, Store: s.store, Retention: retention, Guard: s.guard, Fingerprints: s.fp, SkewMargin: skew, Now: s.clock}
}

func (s *Sim) bulkReopen(ctx context.Context, a *actor, t *opTask) error {
	be := s.backend()
	if t.target == "" {
		var ids []string
		for _, c := range s.charges {
			rec, err := s.inner.Get(ctx, c.ID, s.now)
			if err == nil && rec.State == driver.StateFailed {
				ids = append(ids, c.ID)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		spec := approval.Spec{Kind: approval.Reopen, NewAttempt: true, Reason: "protosim: customers funded", ChargeIDs: ids}
		targets, err := be.Select(ctx, spec, s.now)
		if err != nil {
			s.tracef("%s: no proposal: %v", a.name, err)
			return nil // nothing proposable now (a person reads why and stops)
		}
		if s.cfg.Plant == PlantRunWithoutBook {
			a.proposal = "unbooked"
			defer func() { a.proposal = "" }()
			executor{s, be}.Execute(ctx, approval.Proposal{ID: "unbooked", Spec: spec, Targets: targets, At: s.now}, targets, ivan)
			return nil
		}
		p, err := s.book.Propose(olga, spec, targets)
		if err != nil {
			return err
		}
		if _, err := s.book.Approve(p.ID, ivan); err != nil {
			return err
		}
		for _, t := range p.Targets {
			if t.HardDecline {
				s.w.represent[t.ChargeID] = p.ID
			}
		}
		t.target = p.ID
		s.tracef("%s: proposal %s (%d targets) proposed by olga, approved by ivan", a.name, p.ID, len(targets))
	}
	a.proposal = t.target
	defer func() { a.proposal = "" }()
	if t.tries > 1 {
		s.saw("approval run resumed")
	}
	p, err := s.book.Run(ctx, t.target, ivan, executor{s, be}, nil)
	if errors.Is(err, approval.ErrState) {
		return nil // done, or expired: nothing more to run
	}
	if err != nil {
		return err
	}
	s.w.ops = append(s.w.ops, fmt.Sprintf("approvals ran %s: %s", p.ID, approval.FormatCounts(p.Counts())))
	for outcome := range p.Counts() {
		s.saw("approval target " + outcome)
	}
	return nil
}

// approvalMove counts one approval's reopens of one charge.
type approvalMove struct {
	proposal, charge string
	at               time.Time // the first
	n                int
}

// movedByApproval notes a reopen written by a run of proposal.
func (s *Sim) movedByApproval(proposal, key string) {
	k := proposal + "\x00" + key
	m, ok := s.w.approvalReopens[k]
	if !ok {
		m = &approvalMove{proposal: proposal, charge: key, at: s.now}
		s.w.approvalReopens[k] = m
	}
	m.n++
}

// checkApprovals: (e) an approval moves each target at most once, and
// (d) every record an approval run moved has its audit trail: the
// proposal, another operator's approval, and the run's line, all written
// before the move.
func (s *Sim) checkApprovals() {
	keys := slices.Sorted(maps.Keys(s.w.approvalReopens))
	for _, k := range keys {
		if m := s.w.approvalReopens[k]; m.n > 1 {
			s.violate("(e) approval %s reopened %s %d times", m.proposal, m.charge, m.n)
		}
	}
	if s.trailPath == "" || len(keys) == 0 {
		return
	}
	lines, err := readTrail(s.trailPath)
	if err != nil {
		s.violate("(d) the audit trail cannot be read: %v", err)
		return
	}
	for _, k := range keys {
		m := s.w.approvalReopens[k]
		var proposed, approved, running bool
		for _, l := range lines {
			if l.Proposal != m.proposal || l.At.After(m.at) {
				continue
			}
			switch {
			case l.Action == "propose":
				proposed = true
			case l.Action == "approve" && l.Operator != olga.Name:
				approved = true
			case l.Result == "running":
				running = true
			}
		}
		if !proposed || !approved || !running {
			s.violate("(d) %s reopened under %s without its audit lines before it (proposed %t, approved by another %t, run %t)",
				m.charge, m.proposal, proposed, approved, running)
		}
	}
}

func readTrail(path string) ([]audit.Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []audit.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unfencedReopen is PlantUnfencedApproval's run: each target's FAILED
// record reopened with a new attempt whatever it is now, then redriven.
func (s *Sim) unfencedReopen(ctx context.Context, p approval.Proposal, batch []approval.Target) map[string]approval.Outcome {
	out := map[string]approval.Outcome{}
	for _, t := range batch {
		if _, err := s.guard.Reopen(ctx, t.ChargeID, p.Spec.Reason, idempotency.ReopenOptions{NewGeneration: true, Eligible: charge.EligibleForNewGeneration}); err != nil {
			out[t.Key()] = approval.Outcome{Result: "failed", Why: err.Error()}
			continue
		}
		o := operate.RedriveAt(s.now, retention)
		o.Match = operate.ChargeMatch([]string{t.ChargeID})
		if _, err := (ops{s, s.q}).Redrive(ctx, o); err != nil {
			out[t.Key()] = approval.Outcome{Result: "failed", Why: err.Error()}
			continue
		}
		out[t.Key()] = approval.Outcome{Result: "reopened"}
	}
	return out
}
