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

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
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
	// ErrTampered: the proposal file is not what the audit trail vouches
	// for.
	ErrTampered = errors.New("the proposal does not match its audit trail")
)

// ErrPolicyEdited: the kept policy file is not what the trail's last
// policy line says.
var ErrPolicyEdited = errors.New("the kept four-eyes policy does not match its audit trail")

// ErrPolicy: the process was given another policy than the one kept in
// the backend.
var ErrPolicy = errors.New("not the four-eyes policy kept in the backend")

// Options configure a Book.
type Options struct {
	// Policy says what needs approval (nil: Off). The command line and
	// the console take it from the settings kept in the backend (Kept),
	// never from a flag of their own.
	Policy *Policy
	// Keys, when set (the installation keeps settings), vouch for the
	// trail's lines: a propose, approve, reject or done line counts only
	// if its writer's key signed it — the operator it names, or the
	// console. An approval the proposer appends by hand, however well
	// chained, counts for nothing.
	Keys audit.Keyring
	// TTL is how long a proposal waits for approval, and an approved one
	// for its run (default 24h).
	TTL time.Duration
	// Batch is how many targets a run acts on between two saves of its
	// progress (default 50; at most 500).
	Batch int
	Now   func() time.Time // default time.Now
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
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Batch < 1 || o.TTL < 0 {
		return nil, errors.New("approval options: Batch and TTL must be positive")
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
	b := &Book{o: o, dir: dir, trail: trail, policy: Off}
	if o.Policy != nil {
		b.policy = *o.Policy
	}
	return b, nil
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
	// The totals shown to the approver are what the targets sum to: the
	// digest the trail vouches for covers the targets, not a figure kept
	// beside them that an edit of the file could change.
	p.Totals = Totals(p.Targets)
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
	targets, held := b.holdBack(spec, targets)
	if len(targets) == 0 && len(held) > 0 {
		var w []string
		for _, h := range held {
			w = append(w, h.ChargeID+" declined "+charge.Printable(h.DeclineCode)+": "+h.Why)
		}
		return Proposal{}, fmt.Errorf("nothing to propose: every charge that matches is held back: %s", strings.Join(w, "; "))
	}
	if len(targets) == 0 {
		return Proposal{}, errors.New("nothing matches: no proposal made")
	}
	if spec.Kind == Reconcile {
		// The break's kind decides whether it is an adoption: the one
		// found (frozen), never one the caller merely says.
		if len(targets) != 1 || targets[0].ChargeID != spec.ChargeIDs[0] || !reconcile.Kind(targets[0].Code).Valid() || targets[0].BreakID == "" {
			return Proposal{}, errors.New("a reconcile proposal freezes exactly the one break of its charge (Backend.Select): no proposal made")
		}
		if spec.BreakKind != "" && spec.BreakKind != reconcile.Kind(targets[0].Code) {
			return Proposal{}, fmt.Errorf("the break found is %s, not the %s asked for: no proposal made", targets[0].Code, spec.BreakKind)
		}
		spec.BreakKind, spec.Collects = reconcile.Kind(targets[0].Code), targets[0].Collects
	}
	now := b.o.Now().UTC()
	p := Proposal{ID: newID(), Spec: spec, Proposer: who, At: now, Expires: now.Add(b.o.TTL),
		Needs: b.policy.NeedsFor(spec, targets), Targets: targets, Totals: Totals(targets), Held: held, State: Pending}
	if p.Needs == "" {
		p.State = Approved
	}
	detail := fmt.Sprintf("%s: %d target(s), %s", spec.Describe(), len(targets), FormatTotals(p.Totals))
	if len(held) > 0 {
		var w []string
		for _, h := range held {
			w = append(w, h.ChargeID+" "+h.DeclineCode)
		}
		detail += fmt.Sprintf("; %d held back (hard declines, never presented again): %s", len(held), strings.Join(w, ", "))
	}
	if p.Needs != "" {
		detail += "; needs another operator's approval: " + p.Needs
	}
	e := b.line(who, "propose", p, string(p.State), detail)
	e.Charges = names(p.Sample(20))
	e.Digest = digest(p)
	err := b.locked(func() error {
		if _, err := b.trail.Append(e); err != nil {
			return err
		}
		return b.save(p)
	})
	return p, err
}

// holdBack splits off, for a reopen with a new attempt, the hard-declined
// targets the policy does not let be presented again (no
// represent-hard-decline): held back, with their code, never frozen as
// targets.
func (b *Book) holdBack(spec Spec, targets []Target) ([]Target, []Held) {
	if spec.Kind != Reopen || !spec.NewAttempt || b.policy.RepresentHardDecline {
		return targets, nil
	}
	var keep []Target
	var held []Held
	for _, t := range targets {
		if why, hard := charge.HardDecline(t.DeclineCode); hard || t.HardDecline {
			held = append(held, Held{Target: t, Why: fmt.Sprintf("a hard decline (%s): never presented again under a new key; the four-eyes policy has no represent-hard-decline", why)})
			continue
		}
		keep = append(keep, t)
	}
	return keep, held
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
	if err := (Spec{Kind: Redrive, Reason: why}).Check(); err != nil {
		return Proposal{}, fmt.Errorf("why it is rejected (--reason): %w", err)
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
		case to == Rejected && p.State == Running && b.Busy(p.ID):
			return refuse(fmt.Errorf("%w: stop its run first", ErrBusy), "its run is going on")
		case p.State != Pending && !(to == Rejected && (p.State == Approved || p.State == Running)):
			return refuse(fmt.Errorf("%w: %s is %s", ErrState, p.ID, p.State), "the proposal is "+string(p.State))
		case to == Approved && who.Same(p.Proposer):
			return refuse(ErrSamePerson, "the proposer may not approve her own proposal")
		}
		if to == Approved {
			// Approve what was proposed, not a file changed since.
			if err := b.vouched(p, false); err != nil {
				return refuse(err, err.Error())
			}
		}
		p.State, p.Decider, p.DecidedAt, p.Why = to, &who, b.o.Now().UTC(), why
		e := b.line(who, action, p, string(to), why)
		e.Digest = digest(p)
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

// runLock takes the run of proposal id: an exclusive flock on its .run
// file, held for as long as the run goes on, and let go by the kernel if
// the process dies. A second run at once, in this process or another of
// the host, is refused (ErrBusy) however slow a batch is; a run that
// stopped is taken over at once.
func (b *Book) runLock(id string) (*os.File, error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: %q is not a proposal id (P- and 10 hex digits)", ErrNotFound, id)
	}
	f, err := os.OpenFile(filepath.Join(b.dir, id+".run"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("proposals: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrBusy, id)
		}
		return nil, fmt.Errorf("proposals: lock: %w", err)
	}
	return f, nil
}

func unlockRun(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	f.Close()
}

// digest is what a proposal's propose and approve lines vouch for: its
// id, spec, proposer, targets, why it needs approval and its expiry (a
// file given a later expiry is not what was proposed).
func digest(p Proposal) string {
	raw, _ := json.Marshal(struct {
		ID       string
		Spec     Spec
		Proposer string
		Targets  []Target
		Needs    string
		Expires  time.Time
		Held     []Held `json:",omitempty"` // absent from a proposal made before holds were kept: its digest unchanged
	}{p.ID, p.Spec, strings.ToLower(strings.TrimSpace(p.Proposer.Name)), p.Targets, p.Needs, p.Expires.UTC(), p.Held})
	return audit.Hash(raw)
}

// terminal is the trail's word that proposal id is over (expired,
// rejected or done), whatever its file says now; "" if it has none.
func terminal(lines []audit.Entry) string {
	for _, e := range lines {
		switch {
		case e.Action == "expire" && e.Result == string(Expired),
			e.Action == "reject" && e.Result == string(Rejected),
			e.Action == "done" && e.Result == string(Done):
			return fmt.Sprintf("%s (seq %d)", e.Result, e.Seq)
		}
	}
	return ""
}

// vouched checks p against the trail: a propose line of its proposer for
// exactly this proposal (digest) and, where it needs approval, an approve
// line for it by another operator. A proposal file edited by hand (a
// pending one made approved, a target added) has neither.
func (b *Book) vouched(p Proposal, needApproval bool) error {
	d := digest(p)
	if b.o.Keys != nil {
		// The trail itself first: whole, every line vouched for by its
		// writer's key. A line rewritten in place, lines copied into it
		// (a withdrawn approval replayed after a rotation) break it.
		if err := b.trailWhole(); err != nil {
			return fmt.Errorf("%w: %w: nothing is approved or run until the trail is whole", ErrTampered, err)
		}
	}
	lines, err := b.trail.All(audit.Filter{Proposal: p.ID})
	if err != nil {
		return err
	}
	if b.o.Keys != nil {
		// Only what a writer vouched for: the operator it names signed
		// it, or the console did.
		lines = slices.DeleteFunc(lines, func(e audit.Entry) bool { _, err := e.Vouched(b.o.Keys); return err != nil })
	}
	if over := terminal(lines); over != "" {
		return fmt.Errorf("%w: the audit trail says %s is over: %s; its file says %s: not approved nor run; propose it again", ErrTampered, p.ID, over, p.State)
	}
	// A switch of sign-in (retire-tokens: the identity provider names
	// people from then on) after the proposal: its proposer has another
	// name now, and an approval after it compares names of two sign-ins.
	switched, err := b.signInSwitches()
	if err != nil {
		return err
	}
	proposed, approved, proposals, after := false, false, 0, int64(0)
	for _, e := range lines {
		if e.Action == "propose" {
			// Only the first propose line of an id is the proposal: a
			// second, of the proposer's own making, vouches for nothing.
			proposals++
			proposed = proposed || (proposals == 1 && e.Digest == d && (Actor{Name: e.Operator}).Same(p.Proposer))
			if proposals == 1 {
				for _, seq := range switched {
					if seq > e.Seq && after == 0 {
						after = seq
					}
				}
			}
			continue
		}
		if e.Digest == d && e.Action == "approve" && e.Result == string(Approved) && !(Actor{Name: e.Operator}).Same(p.Proposer) &&
			(after == 0 || e.Seq < after) {
			approved = true
		}
	}
	// Whether it needs another operator is the kept policy's word now,
	// not only what the file (or the policy when it was made) says.
	needs := p.Needs
	if now := b.policy.NeedsFor(p.Spec, p.Targets); now != "" {
		needs = now
	}
	switch {
	case proposals > 1:
		return fmt.Errorf("%w: the audit trail has %d propose lines for %s (only its first is the proposal): not run; propose it again", ErrTampered, proposals, p.ID)
	case !proposed:
		return fmt.Errorf("%w: %s is not what the audit trail says was proposed (the proposal file was changed): not run; propose it again", ErrTampered, p.ID)
	case !needApproval && after > 0:
		return fmt.Errorf("%w: %s was proposed before the sign-in changed (seq %d: people are named by the identity provider since), so its proposer's name then is not a name of now: not approved; propose it again", ErrState, p.ID, after)
	case needApproval && needs != "" && !approved:
		return fmt.Errorf("%w: the audit trail has no approval of %s as it is by another operator (it needs one: %s): not run", ErrTampered, p.ID, needs)
	}
	return nil
}

// signInSwitches are the seqs, in order, of the trail's lines that say
// sign-in changed (retire-tokens: token to proxy; sign-in: any other),
// vouched for where the book has keys.
func (b *Book) signInSwitches() ([]int64, error) {
	lines, err := b.trail.All(audit.Filter{})
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, e := range lines {
		if e.Action != "retire-tokens" && e.Action != "sign-in" {
			continue
		}
		if b.o.Keys != nil {
			if _, err := e.Vouched(b.o.Keys); err != nil {
				continue
			}
		}
		out = append(out, e.Seq)
	}
	slices.Sort(out)
	return out, nil
}

// trailWhole checks the trail's current file: its chain from its first
// line on (a rotated file's first line goes on from the file before) and
// every line's signature.
func (b *Book) trailWhole() error {
	f, err := os.Open(b.trail.Path())
	if err != nil {
		return err
	}
	defer f.Close()
	first, err := audit.FirstOf(f)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	_, err = audit.VerifyKeyed(f, b.trail.Path(), first, b.o.Keys)
	return err
}

// Run executes approved proposal id by who, in batches, calling progress
// after each; it resumes a run that stopped and acts only on targets
// without an outcome. It returns when every target has an outcome, or ctx
// is done (the proposal stays running; Run again resumes, until the
// proposal's TTL has passed).
func (b *Book) Run(ctx context.Context, id string, who Actor, ex Executor, progress func(Proposal)) (Proposal, error) {
	lock, err := b.runLock(id)
	if err != nil {
		return Proposal{}, err
	}
	defer unlockRun(lock)
	var p Proposal
	// Take the run.
	err = b.locked(func() error {
		var err error
		if p, err = b.load(id); err != nil {
			return err
		}
		now := b.o.Now()
		if p.State == Running && !now.Before(p.Expires) {
			// A run that stopped is resumed only within the proposal's
			// TTL: its targets were frozen then.
			p.State = Expired
			if _, err := b.trail.Append(b.line(Actor{Name: "system", Via: who.Via}, "expire", p, "expired",
				fmt.Sprintf("its run stopped with %d of %d target(s) to go and was not resumed within %s of its proposal: propose the rest again", len(p.Remaining()), len(p.Targets), b.o.TTL))); err != nil {
				return err
			}
			if err := b.save(p); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s expired (its run stopped and was not resumed within %s of its proposal)", ErrState, p.ID, b.o.TTL)
		}
		if err := b.expireSaved(&p); err != nil {
			return err
		}
		switch {
		case p.State == Pending:
			return fmt.Errorf("%w: %s waits for another operator's approval (%s)", ErrState, p.ID, p.Needs)
		case p.State != Approved && p.State != Running:
			return fmt.Errorf("%w: %s is %s", ErrState, p.ID, p.State)
		}
		if err := b.vouched(p, true); err != nil {
			if _, aerr := b.trail.Append(b.line(who, "execute", p, "refused", err.Error())); aerr != nil {
				return aerr
			}
			return err
		}
		if p.Needs == "" && !who.Same(p.Proposer) && p.Decider == nil {
			// Not asked for approval: the proposer's own to run; anyone
			// else running it decides it, and is named.
			p.Decider = &who
		}
		detail := fmt.Sprintf("%d of %d target(s) to go", len(p.Remaining()), len(p.Targets))
		action := "execute"
		if p.State == Running {
			action, detail = "resume", detail+" (a run that stopped is taken over)"
		}
		p.State = Running
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
		px := p
		px.representHard = b.Policy().RepresentHardDecline
		outs := ex.Execute(ctx, px, batch, who)
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
				o.Why = charge.Clip(o.Why, 300)
				cur.Outcomes[t.Key()] = o
				switch o.Result {
				case "moved", "reopened", "sent", "adopted", "resolved":
					moved = append(moved, t.Name())
				case "failed":
					failed = append(failed, t.Name())
				default:
					held = append(held, t.Name())
				}
			}
			cur.Batches++
			// What the batch did is saved first: a line that cannot be
			// written then stops the run, and a resume does not act on
			// these targets again.
			if err := b.save(cur); err != nil {
				return err
			}
			p = cur
			done, all := cur.Progress()
			e := b.line(who, "batch", cur, "batch "+fmt.Sprint(cur.Batches),
				fmt.Sprintf("%d of %d done: in this batch %d %s, %d held back, %d failed", done, all, len(moved), doneWord(cur.Spec.Kind), len(held), len(failed)))
			e.Charges, e.Held, e.Failed = moved, held, failed
			if _, err := b.trail.Append(e); err != nil {
				return fmt.Errorf("batch %d was done and its outcomes are saved in the proposal, but its audit line could not be written (%w): the run stops; fix the trail, then run it again", cur.Batches, err)
			}
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
		cur.State, cur.FinishedAt = Done, b.o.Now().UTC()
		c := cur.Counts()
		if _, err := b.trail.Append(b.line(who, "done", cur, "done", fmt.Sprintf("%d target(s): %s", len(cur.Targets), FormatCounts(c)))); err != nil {
			return err
		}
		p = cur
		return b.save(cur)
	})
	return p, err
}

// Busy says whether a run holds proposal id now (in any process of the
// host).
func (b *Book) Busy(id string) bool {
	f, err := b.runLock(id)
	if err != nil {
		return errors.Is(err, ErrBusy)
	}
	unlockRun(f)
	return false
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
	for _, k := range outcomeOrder {
		if c[k] > 0 {
			w = append(w, fmt.Sprintf("%d %s", c[k], k))
		}
	}
	for k, n := range c {
		if !slices.Contains(outcomeOrder, k) {
			w = append(w, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(w) == 0 {
		return "nothing done"
	}
	return strings.Join(w, ", ")
}

var outcomeOrder = []string{"moved", "reopened", "sent", "adopted", "resolved", "held back", "skipped", "failed"}

// doneWord is what a target done by a proposal of kind became.
func doneWord(k Kind) string {
	switch k {
	case Reopen:
		return "reopened"
	case Renotify:
		return "sent"
	case Reconcile:
		return "resolved"
	}
	return "moved"
}
