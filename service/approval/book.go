package approval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/finedge/idempotent-consumer/internal/audit"
)

// The errors of a Book.
var (
	ErrNotFound = errors.New("no such proposal")
	// ErrSamePerson: the proposer may not approve (or reject) her own
	// proposal where approval is needed.
	ErrSamePerson = errors.New("the proposer cannot approve her own proposal: another operator must")
	// ErrState: the proposal is not in a state that allows the step.
	ErrState = errors.New("not possible in the proposal's state")
	// ErrBusy: another run holds the proposal.
	ErrBusy = errors.New("another run is executing this proposal")
)

// ErrPolicy: the process was started with another policy than the one
// kept beside the trail.
var ErrPolicy = errors.New("not the four-eyes policy kept beside the audit trail")

// Options configure a Book.
type Options struct {
	// Policy says what needs approval; nil: the policy kept beside the
	// trail (Off if none was ever set). A policy given where another is
	// kept is refused (ErrPolicy): the policy is the installation's, set
	// once (by the first process given one, or SetPolicy), never each
	// process's own — a command started without the flag cannot skip it.
	Policy *Policy
	// TTL is how long a proposal waits for approval, and an approved one
	// for its run (default 24h).
	TTL time.Duration
	// Batch is how many targets a run acts on between two saves of its
	// progress (default 50; at most 500).
	Batch int
	// RunLease is how long a run holds a proposal without a batch done
	// before another may take it over (default 2m).
	RunLease time.Duration
	Now      func() time.Time // default time.Now
}

// Book keeps the proposals of one audit trail: the directory
// TRAIL.proposals next to it.
type Book struct {
	o      Options
	dir    string
	trail  *audit.Trail
	policy Policy
}

// Open opens (creating, mode 0700) the proposals of trail.
func Open(trail *audit.Trail, o Options) (*Book, error) {
	if trail == nil {
		return nil, errors.New("approvals need the audit trail (--audit-file)")
	}
	o.TTL = cmp.Or(o.TTL, 24*time.Hour)
	o.Batch = min(cmp.Or(o.Batch, 50), 500)
	o.RunLease = cmp.Or(o.RunLease, 2*time.Minute)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Batch < 1 || o.TTL < 0 || o.RunLease < 0 {
		return nil, errors.New("approval options: Batch, TTL and RunLease must be positive")
	}
	dir := trail.Path() + ".proposals"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("proposals: %w", err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("proposals: %s is not a directory", dir)
	} else if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("proposals: %s is open to others and could not be made 0700: %w", dir, err)
		}
	}
	b := &Book{o: o, dir: dir, trail: trail}
	err := b.locked(func() error {
		kept, ok, err := b.keptPolicy()
		switch {
		case err != nil:
			return err
		case o.Policy == nil && ok:
			b.policy = kept
		case o.Policy == nil:
			b.policy = Off
		case ok && kept != *o.Policy:
			return fmt.Errorf("%w: %s is kept beside %s, this process was given %s; change it with chargerecovery approvals policy %s (audited), or give the kept one",
				ErrPolicy, kept, trail.Path(), *o.Policy, *o.Policy)
		case ok:
			b.policy = kept
		default:
			b.policy = *o.Policy
			return b.keepPolicy(Actor{Name: "system", Via: "start"}, b.policy, "the first policy given")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

type keptPolicy struct {
	Policy string    `json:"policy"`
	By     Actor     `json:"by"`
	At     time.Time `json:"at"`
}

func (b *Book) policyPath() string { return filepath.Join(b.dir, "policy.json") }

func (b *Book) keptPolicy() (Policy, bool, error) {
	raw, err := os.ReadFile(b.policyPath())
	if errors.Is(err, fs.ErrNotExist) {
		return Off, false, nil
	}
	if err != nil {
		return Off, false, fmt.Errorf("proposals: %w", err)
	}
	var k keptPolicy
	if err := json.Unmarshal(raw, &k); err != nil {
		return Off, false, fmt.Errorf("proposals: %s is not a policy: %w", b.policyPath(), err)
	}
	p, err := ParsePolicy(k.Policy)
	if err != nil {
		return Off, false, fmt.Errorf("proposals: %s: %w", b.policyPath(), err)
	}
	return p, true, nil
}

// keepPolicy writes p beside the trail, with its audit line (under the
// lock).
func (b *Book) keepPolicy(who Actor, p Policy, why string) error {
	raw, err := json.Marshal(keptPolicy{Policy: p.String(), By: who, At: b.o.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := b.trail.Append(audit.Entry{At: b.o.Now().UTC(), Operator: who.Name, Role: who.Role, Via: who.Via, Action: "policy",
		Result: p.String(), Reason: why}); err != nil {
		return err
	}
	return writeFileAtomic(b.dir, b.policyPath(), raw)
}

// SetPolicy changes the kept policy, by who (an operator; where the kept
// policy asks for any approval, the caller must have named who by her
// token), for why.
func (b *Book) SetPolicy(who Actor, p Policy, why string) error {
	if strings.TrimSpace(why) == "" {
		return errors.New("say why the policy changes (--reason)")
	}
	return b.locked(func() error {
		if err := b.keepPolicy(who, p, why); err != nil {
			return err
		}
		b.policy = p
		return nil
	})
}

// Policy is the book's policy.
func (b *Book) Policy() Policy { return b.policy }

// TTL is how long a proposal waits.
func (b *Book) TTL() time.Duration { return b.o.TTL }

// locked runs f holding the book's lock (an flock on its directory's
// .lock file: every process of the host).
func (b *Book) locked(f func() error) error {
	lf, err := os.OpenFile(filepath.Join(b.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("proposals: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("proposals: lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	return f()
}

func (b *Book) path(id string) string { return filepath.Join(b.dir, id+".json") }

func (b *Book) load(id string) (Proposal, error) {
	if !validID(id) {
		return Proposal{}, fmt.Errorf("%w: %q is not a proposal id (P- and 10 hex digits)", ErrNotFound, id)
	}
	raw, err := os.ReadFile(b.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return Proposal{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Proposal{}, fmt.Errorf("proposal %s: %w", id, err)
	}
	var p Proposal
	if err := json.Unmarshal(raw, &p); err != nil {
		return Proposal{}, fmt.Errorf("proposal %s: the file %s is not a proposal: %w", id, b.path(id), err)
	}
	if p.ID != id {
		return Proposal{}, fmt.Errorf("proposal %s: the file %s names %q", id, b.path(id), p.ID)
	}
	return p, nil
}

// save writes p whole.
func (b *Book) save(p Proposal) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return writeFileAtomic(b.dir, b.path(p.ID), raw)
}

// writeFileAtomic writes raw to path: a temporary file in dir, synced,
// renamed over the old, the directory synced.
func writeFileAtomic(dir, path string, raw []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("proposals: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return fmt.Errorf("proposals: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("proposals: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("proposals: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("proposals: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// expire marks p expired when it waited too long; it says whether it did.
func (b *Book) expire(p *Proposal, now time.Time) bool {
	if (p.State == Pending || p.State == Approved) && !now.Before(p.Expires) {
		p.State = Expired
		return true
	}
	return false
}

func (b *Book) line(who Actor, action string, p Proposal, result, detail string) audit.Entry {
	return audit.Entry{At: b.o.Now().UTC(), Operator: who.Name, Role: who.Role, Via: who.Via, Action: action,
		Proposal: p.ID, Reason: p.Spec.Reason, Result: result, Detail: detail}
}

// Propose freezes targets as a proposal of spec by who, written to the
// audit trail first. Where the policy does not ask for approval the
// proposal is approved at once (the proposer runs it); else it waits for
// another operator.
func (b *Book) Propose(who Actor, spec Spec, targets []Target) (Proposal, error) {
	if err := spec.Check(); err != nil {
		return Proposal{}, err
	}
	if strings.TrimSpace(who.Name) == "" {
		return Proposal{}, errors.New("who proposes? no operator named")
	}
	if len(targets) == 0 {
		return Proposal{}, errors.New("nothing matches: no proposal made")
	}
	now := b.o.Now().UTC()
	p := Proposal{ID: newID(), Spec: spec, Proposer: who, At: now, Expires: now.Add(b.o.TTL),
		Needs: b.policy.Needs(spec, len(targets)), Targets: targets, Totals: Totals(targets), State: Pending}
	if p.Needs == "" {
		p.State = Approved
	}
	detail := fmt.Sprintf("%s: %d target(s), %s", spec.Describe(), len(targets), FormatTotals(p.Totals))
	if p.Needs != "" {
		detail += "; needs another operator's approval: " + p.Needs
	}
	e := b.line(who, "propose", p, string(p.State), detail)
	e.Charges = names(p.Sample(20))
	err := b.locked(func() error {
		if _, err := b.trail.Append(e); err != nil {
			return err
		}
		return b.save(p)
	})
	return p, err
}

// Get is the proposal id as it is now.
func (b *Book) Get(id string) (Proposal, error) {
	var p Proposal
	err := b.locked(func() error {
		var err error
		p, err = b.loadLive(id)
		return err
	})
	return p, err
}

// loadLive loads proposal id, marked expired (with its line) if it
// waited too long (under the lock).
func (b *Book) loadLive(id string) (Proposal, error) {
	p, err := b.load(id)
	if err != nil {
		return p, err
	}
	return p, b.expireSaved(&p)
}

// expireSaved marks p expired, with its audit line, if it waited too long.
func (b *Book) expireSaved(p *Proposal) error {
	if !b.expire(p, b.o.Now()) {
		return nil
	}
	why := fmt.Sprintf("not approved within %s", b.o.TTL)
	if p.Needs == "" || p.Decider != nil {
		why = fmt.Sprintf("approved, but not run within %s of its proposal", b.o.TTL)
	}
	if _, err := b.trail.Append(b.line(Actor{Name: "system", Via: p.Proposer.Via}, "expire", *p, "expired", why)); err != nil {
		return err
	}
	return b.save(*p)
}

// List is every proposal, newest first (expired ones marked so).
func (b *Book) List() ([]Proposal, error) {
	var out []Proposal
	err := b.locked(func() error {
		ents, err := os.ReadDir(b.dir)
		if err != nil {
			return fmt.Errorf("proposals: %w", err)
		}
		for _, de := range ents {
			id, ok := strings.CutSuffix(de.Name(), ".json")
			if !ok || !validID(id) {
				continue
			}
			p, err := b.load(id)
			if err != nil {
				return err
			}
			if err := b.expireSaved(&p); err != nil {
				return err
			}
			out = append(out, p)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b Proposal) int { return b.At.Compare(a.At) })
	return out, err
}

// Approve approves proposal id by who, a different operator than the
// proposer. A proposal the policy did not ask approval for is approved
// already.
func (b *Book) Approve(id string, who Actor) (Proposal, error) {
	return b.decide(id, who, Approved, "")
}

// Reject rejects proposal id by who, for why: nothing of it will run. The
// proposer may withdraw her own proposal this way.
func (b *Book) Reject(id string, who Actor, why string) (Proposal, error) {
	if strings.TrimSpace(why) == "" {
		return Proposal{}, errors.New("say why it is rejected (--reason)")
	}
	return b.decide(id, who, Rejected, why)
}

func (b *Book) decide(id string, who Actor, to State, why string) (Proposal, error) {
	var p Proposal
	err := b.locked(func() error {
		var err error
		p, err = b.loadLive(id)
		if err != nil {
			return err
		}
		action := map[State]string{Approved: "approve", Rejected: "reject"}[to]
		refuse := func(err error, detail string) error {
			e := b.line(who, action, p, "refused", detail)
			if _, aerr := b.trail.Append(e); aerr != nil {
				return aerr
			}
			return err
		}
		switch {
		case strings.TrimSpace(who.Name) == "":
			return errors.New("who decides? no operator named")
		case p.State == Approved && to == Approved && p.Needs == "":
			return nil // approved at its proposal: nothing to do
		case p.State != Pending && !(to == Rejected && p.State == Approved):
			return refuse(fmt.Errorf("%w: %s is %s", ErrState, p.ID, p.State), "the proposal is "+string(p.State))
		case to == Approved && who.Same(p.Proposer):
			return refuse(ErrSamePerson, "the proposer may not approve her own proposal")
		}
		p.State, p.Decider, p.DecidedAt, p.Why = to, &who, b.o.Now().UTC(), why
		e := b.line(who, action, p, string(to), why)
		if why != "" {
			e.Reason, e.Detail = why, "proposal's reason: "+p.Spec.Reason
		}
		if _, err := b.trail.Append(e); err != nil {
			return err
		}
		return b.save(p)
	})
	return p, err
}

// Executor acts on one batch of a proposal's targets and says what became
// of each (by Target.Key; a target it says nothing of is failed).
type Executor interface {
	Execute(ctx context.Context, p Proposal, batch []Target, who Actor) map[string]Outcome
}

// Run executes approved proposal id by who, in batches, calling progress
// after each; it resumes a run that stopped (its lease lapsed) and acts
// only on targets without an outcome. It returns when every target has an
// outcome, or ctx is done (the proposal stays running; Run again resumes).
func (b *Book) Run(ctx context.Context, id string, who Actor, ex Executor, progress func(Proposal)) (Proposal, error) {
	runner := newID()
	var p Proposal
	// Take the run.
	err := b.locked(func() error {
		var err error
		p, err = b.loadLive(id)
		if err != nil {
			return err
		}
		now := b.o.Now()
		switch {
		case p.State == Running && now.Before(p.RunnerUntil):
			return fmt.Errorf("%w (until %s at the latest)", ErrBusy, p.RunnerUntil.UTC().Format(time.RFC3339))
		case p.State == Pending:
			return fmt.Errorf("%w: %s waits for another operator's approval (%s)", ErrState, p.ID, p.Needs)
		case p.State != Approved && p.State != Running:
			return fmt.Errorf("%w: %s is %s", ErrState, p.ID, p.State)
		case p.Needs == "" && !who.Same(p.Proposer) && p.Decider == nil:
			// Not asked for approval: the proposer's own to run; anyone
			// else running it decides it, and is named.
			p.Decider = &who
		}
		detail := fmt.Sprintf("%d of %d target(s) to go", len(p.Remaining()), len(p.Targets))
		action := "execute"
		if p.State == Running {
			action, detail = "resume", detail+" (a run that stopped is taken over)"
		}
		p.State, p.Runner, p.RunnerUntil = Running, runner, now.Add(b.o.RunLease)
		if _, err := b.trail.Append(b.line(who, action, p, "running", detail)); err != nil {
			return err
		}
		return b.save(p)
	})
	if err != nil {
		return p, err
	}
	for {
		rest := p.Remaining()
		if len(rest) == 0 || ctx.Err() != nil {
			break
		}
		batch := rest[:min(b.o.Batch, len(rest))]
		outs := ex.Execute(ctx, p, batch, who)
		if ctx.Err() != nil {
			// Stopped mid-batch: keep only what is known to be done; the
			// rest goes again on the next run (every action is safe to
			// repeat: a redrive of a moved entry finds nothing, a reopen
			// of a reopened record is refused, a notice is claimed once).
			for k, o := range outs {
				if o.Result == "failed" {
					delete(outs, k)
				}
			}
		}
		err := b.locked(func() error {
			cur, err := b.load(id)
			if err != nil {
				return err
			}
			if cur.Runner != runner {
				return fmt.Errorf("%w: taken over by another run (this one was too slow to renew its hold)", ErrBusy)
			}
			if cur.Outcomes == nil {
				cur.Outcomes = map[string]Outcome{}
			}
			now := b.o.Now().UTC()
			var moved, held, failed []string
			for _, t := range batch {
				o, ok := outs[t.Key()]
				if !ok {
					if ctx.Err() != nil {
						continue
					}
					o = Outcome{Result: "failed", Why: "the run said nothing of it"}
				}
				o.At = cmp.Or(o.At, now)
				cur.Outcomes[t.Key()] = o
				switch o.Result {
				case "moved", "reopened", "sent":
					moved = append(moved, t.Name())
				case "failed":
					failed = append(failed, t.Name())
				default:
					held = append(held, t.Name())
				}
			}
			cur.Batches++
			cur.RunnerUntil = now.Add(b.o.RunLease)
			done, all := cur.Progress()
			e := b.line(who, "batch", cur, "batch "+fmt.Sprint(cur.Batches),
				fmt.Sprintf("%d of %d done: in this batch %d %s, %d held back, %d failed", done, all, len(moved), doneWord(cur.Spec.Kind), len(held), len(failed)))
			e.Charges, e.Held, e.Failed = moved, held, failed
			if _, err := b.trail.Append(e); err != nil {
				return err
			}
			if err := b.save(cur); err != nil {
				return err
			}
			p = cur
			return nil
		})
		if err != nil {
			return p, err
		}
		if progress != nil {
			progress(p)
		}
	}
	if len(p.Remaining()) > 0 {
		return p, fmt.Errorf("stopped with %d of %d target(s) to go: %w (run it again to resume)", len(p.Remaining()), len(p.Targets), cmp.Or(ctx.Err(), errors.New("stopped")))
	}
	err = b.locked(func() error {
		cur, err := b.load(id)
		if err != nil {
			return err
		}
		if cur.State == Done {
			p = cur
			return nil
		}
		cur.State, cur.FinishedAt, cur.Runner, cur.RunnerUntil = Done, b.o.Now().UTC(), "", time.Time{}
		c := cur.Counts()
		if _, err := b.trail.Append(b.line(who, "done", cur, "done", fmt.Sprintf("%d target(s): %s", len(cur.Targets), FormatCounts(c)))); err != nil {
			return err
		}
		p = cur
		return b.save(cur)
	})
	return p, err
}

func names(ts []Target) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Name())
	}
	return out
}

// FormatCounts is outcome counts in a line, in a fixed order.
func FormatCounts(c map[string]int) string {
	var w []string
	for _, k := range []string{"moved", "reopened", "sent", "held back", "skipped", "failed"} {
		if c[k] > 0 {
			w = append(w, fmt.Sprintf("%d %s", c[k], k))
		}
	}
	for k, n := range c {
		if !slices.Contains([]string{"moved", "reopened", "sent", "held back", "skipped", "failed"}, k) {
			w = append(w, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(w) == 0 {
		return "nothing done"
	}
	return strings.Join(w, ", ")
}

// doneWord is what a target done by a proposal of kind became.
func doneWord(k Kind) string {
	switch k {
	case Reopen:
		return "reopened"
	case Renotify:
		return "sent"
	}
	return "moved"
}
