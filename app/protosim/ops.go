package protosim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// An operator is a person running commands: a script of tasks at times.
// Its progress is kept outside the actor (a person remembers what they
// were doing when the process died): a task whose process died is run
// again, as the person would type the same command again.
type opScript struct {
	name  string
	actor *actor
	lives int
	tasks []*opTask
	next  int
}

type opTask struct {
	at    time.Time
	what  string
	tries int
	// target is what the task chose on its first try (a charge id): a
	// person retrying a command retries it on the same charge.
	target string
	run    func(ctx context.Context, a *actor, t *opTask) error
}

func (s *Sim) spawnOperator(o *opScript) {
	name := o.name
	if o.lives > 0 {
		name = fmt.Sprintf("%s'%d", o.name, o.lives)
	}
	o.actor = s.spawn(name, kindOperator, func(ctx context.Context, a *actor) {
		for o.next < len(o.tasks) {
			t := o.tasks[o.next]
			if err := s.sleep(ctx, t.at); err != nil {
				return
			}
			a.task++
			t.tries++
			err := t.run(ctx, a, t)
			if a.crashed {
				a.die()
				return
			}
			s.tracef("%s: %s %s → %s", a.name, t.what, strings.ReplaceAll(t.target, "\x00", " "), errText(err))
			s.leftBehind(a)
			if err != nil && t.tries < 4 {
				t.at = s.now.Add(time.Duration(1+s.rng.IntN(20)) * time.Minute)
				continue
			}
			o.next++
		}
	})
}

// resolverScript reconciles the bank's statement a few times over the
// run and resolves a break each time: a posting the records lack is
// adopted, a declined generation the bank posted anyway is collected.
func (s *Sim) resolverScript(name string) *opScript {
	// Operators work off the bank's statement, which comes every morning:
	// two of them (the console and the command line) often take the same
	// break within minutes of each other.
	o := &opScript{name: name}
	morning := s.start.Truncate(24 * time.Hour).Add(9 * time.Hour)
	for range 2 + s.rng.IntN(4) {
		day := time.Duration(s.rng.IntN(4)) * 24 * time.Hour
		within := 20 * 60 // minutes after the statement, or (one time in two) seconds: the same alert seen on the console and the command line
		if s.rng.IntN(2) == 0 {
			within = 30
		}
		o.tasks = append(o.tasks, &opTask{at: morning.Add(day + time.Duration(s.rng.IntN(within))*time.Second), what: "reconcile resolve", run: s.resolve})
	}
	slices.SortFunc(o.tasks, func(x, y *opTask) int { return x.at.Compare(y.at) })
	return o
}

// statement is the bank's statement from the run's first day to the end
// of today, exported from the ledger.
func (s *Sim) statement() (statement.Period, reconcile.Postings) {
	p := statement.Period{From: s.start.Truncate(24 * time.Hour), To: s.now.Truncate(24 * time.Hour).Add(24 * time.Hour)}
	return p, func(fn func(statement.Posting) error) (statement.Period, error) {
		for _, q := range s.ledger.Statement(p.From, p.To) {
			if err := fn(q); err != nil {
				return p, err
			}
		}
		return p, nil
	}
}

func (s *Sim) reconcileOptions() (reconcile.Options, reconcile.Postings) {
	p, read := s.statement()
	return reconcile.Options{Store: s.store, Fingerprints: s.fp, Period: p, Now: s.now, Concurrency: 1, SkewMargin: skew}, read
}

func (s *Sim) resolve(ctx context.Context, a *actor, t *opTask) error {
	opts, read := s.reconcileOptions()
	if t.target == "" {
		rep, err := reconcile.Run(ctx, opts, read)
		if err != nil {
			return err
		}
		if len(rep.Breaks) == 0 {
			return nil
		}
		bs := slices.Clone(rep.Breaks)
		slices.SortFunc(bs, func(x, y reconcile.Break) int {
			return cmp.Or(strings.Compare(x.ChargeID, y.ChargeID), strings.Compare(string(x.Kind), string(y.Kind)), strings.Compare(x.ID, y.ID))
		})
		b := bs[0] // two operators at once most often take the same first break
		if s.rng.IntN(3) == 0 {
			b = bs[s.rng.IntN(len(bs))]
		}
		t.target = b.ChargeID + "\x00" + string(b.Kind)
	}
	id, kind, _ := strings.Cut(t.target, "\x00")
	if s.cfg.Plant == PlantLeaveClaim {
		return s.takeAndLeave(ctx, id)
	}
	opts, read = s.reconcileOptions()
	r, err := reconcile.Resolve(ctx, opts, read, reconcile.ResolveRequest{ChargeID: id, Kind: reconcile.Kind(kind), Reason: "protosim", Operator: a.name,
		Guard: s.guard, Unverified: true, Refunded: s.cfg.Plant == PlantMarkNotCollect && kind == string(reconcile.FailedButPosted)})
	if errors.Is(err, reconcile.ErrNoBreak) {
		t.target = "" // nothing left to do for it
		return nil
	}
	if err != nil {
		return err
	}
	s.w.ops = append(s.w.ops, fmt.Sprintf("%s %s %s's %s break", a.name, r.Action, id, kind))
	s.saw("resolve " + r.Action)
	if k := reconcile.Kind(kind); k == reconcile.FailedButPosted || k == reconcile.PostedNotRecorded {
		if _, ok := s.w.collected[id]; !ok {
			s.w.collected[id] = s.now
			s.tracef("%s: %s's posting is recorded as collected (%s): no debit may follow", a.name, id, r.Action)
		}
	}
	return nil
}

// reopenerScript reopens a FAILED charge (with a new attempt, mostly)
// and redrives its message, as an operator does from the DLQ page.
func (s *Sim) reopenerScript(name string) *opScript {
	o := &opScript{name: name}
	for range 1 + s.rng.IntN(3) {
		o.tasks = append(o.tasks, &opTask{at: s.now.Add(time.Duration(s.rng.IntN(72*60)) * time.Minute), what: "reopen", run: s.reopen})
	}
	slices.SortFunc(o.tasks, func(x, y *opTask) int { return x.at.Compare(y.at) })
	return o
}

func (s *Sim) reopen(ctx context.Context, a *actor, t *opTask) error {
	if t.target == "" {
		var failed []string
		for _, c := range s.charges {
			rec, err := s.guard.Get(ctx, c.ID)
			if err == nil && rec.State == driver.StateFailed {
				failed = append(failed, c.ID)
			} else if err != nil && !errors.Is(err, driver.ErrNotFound) {
				return err
			}
		}
		if len(failed) == 0 {
			return nil
		}
		t.target = failed[s.rng.IntN(len(failed))]
		if s.rng.IntN(4) > 0 {
			t.target += "\x00new-attempt"
		}
	}
	id, mode, _ := strings.Cut(t.target, "\x00")
	var rec driver.Record
	var err error
	if s.cfg.Plant == PlantAnyNewAttempt {
		rec, err = s.guard.Reopen(ctx, id, "protosim", idempotency.ReopenOptions{NewGeneration: true, Operator: a.name})
	} else {
		rec, err = operate.Reopen(ctx, s.guard, id, "protosim", mode == "new-attempt", a.name)
	}
	switch {
	case errors.Is(err, idempotency.ErrNotFailed) && rec.State == driver.StateInProgress:
		// Reopened already (this person's earlier try): the redrive is
		// what is left, as the command's "next:" line says.
	case errors.Is(err, charge.ErrHardDecline):
		s.saw("new attempt on a hard decline refused")
		return nil
	case errors.Is(err, idempotency.ErrNotFailed), errors.Is(err, idempotency.ErrNotEligible), errors.Is(err, operate.ErrDeclinedSameKey):
		return nil // nothing to do: a person reads the refusal and stops
	case err != nil:
		return err
	default:
		s.w.ops = append(s.w.ops, fmt.Sprintf("%s reopened %s into generation %d", a.name, id, rec.Generation))
		if rec.Generation > 1 {
			s.saw("reopen with a new attempt")
		}
	}
	if _, err := s.gate(ctx, "queue.Redrive "+id); err != nil {
		return err
	}
	o := operate.RedriveAt(s.now, retention)
	o.Match = operate.ChargeMatch([]string{id})
	_, err = s.q.Redrive(ctx, o)
	s.nudge()
	return err
}

// takeAndLeave is PlantLeaveClaim: the first of two writes of a move
// (the record taken under a live lease of this operator's) and not the
// second, as the collection of a break was before it was one write.
func (s *Sim) takeAndLeave(ctx context.Context, id string) error {
	rec, err := s.guard.Get(ctx, id)
	if err != nil {
		return err
	}
	token, _ := s.guard.ClaimRequest(id, rec.Fingerprint)
	switch rec.State {
	case driver.StateFailed:
		_, err = s.store.Reopen(ctx, driver.ReopenRequest{Key: id, Token: token.Token, Reason: "planted", Now: s.now, LeaseUntil: s.now.Add(lease),
			ExpiresAt: rec.ExpiresAt, PrevToken: rec.Token})
	case driver.StateWaiting, driver.StateInProgress:
		token.LeaseExpiredBy = rec.LeaseUntil
		_, err = s.store.Claim(ctx, token)
	}
	return err
}
