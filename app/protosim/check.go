package protosim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The invariants, each with its letter in docs/correctness.md.

func (s *Sim) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	s.w.violations = append(s.w.violations, v)
	s.tracef("VIOLATION %s", v)
}

// leftBehind is checked when an operator's task returns (it did not die):
// a move of a record is all or nothing, so the task leaves no claim of its
// own behind — no record IN_PROGRESS under a token it wrote with a claim
// or a live lease, which only a lease expiry would move, and which the
// next delivery would debit (invariant g).
func (s *Sim) leftBehind(a *actor) {
	var keys []string
	for kt, n := range s.w.tokens {
		if n.actor == a.name && n.task == a.task && n.live {
			keys = append(keys, kt)
		}
	}
	sort.Strings(keys)
	for _, kt := range keys {
		key, token, _ := strings.Cut(kt, "\x00")
		if strings.HasPrefix(key, driver.InternalKeyPrefix) {
			continue
		}
		rec, err := s.inner.Get(s.ctx, key, s.now)
		if err == nil && rec.State == driver.StateInProgress && rec.Token == token {
			s.violate("(g) %s returned and left %s IN_PROGRESS under its own %s (generation %d): the next delivery after the lease takes it over and debits",
				a.name, key, s.w.tokens[kt].op, rec.Generation)
		}
	}
}

// check runs the end-of-run invariants.
func (s *Sim) check(ctx context.Context) {
	// (a) exactly-once posting: the ledger holds at most one posting of
	// the collector's per charge (a generation the bank declined and
	// booked anyway is the bank's, and reconciliation's to find), and
	// nothing posts after an operator recorded a charge's money as
	// collected.
	postings := map[string][]string{}
	for _, e := range s.ledger.Entries() {
		if e.Dropped || s.w.latePosted[e.IdempotencyKey] {
			continue
		}
		id, _ := splitKey(e.IdempotencyKey)
		postings[id] = append(postings[id], e.IdempotencyKey)
		if at, ok := s.w.collected[id]; ok && e.PostedAt.After(at) {
			s.violate("(a) %s debited under %s at %s, after an operator recorded its posting as collected at %s",
				id, e.IdempotencyKey, e.PostedAt.Sub(s.start), at.Sub(s.start))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(postings)) {
		if keys := postings[id]; len(keys) > 1 {
			s.violate("(a) %s posted %d times by the collector: %s", id, len(keys), strings.Join(keys, ", "))
		}
	}
	// (b) a hard decline is never presented again, under any key — but
	// once, under one later generation, where an approved proposal marked
	// it (a policy with represent-hard-decline, its code shown).
	hard := map[string]int{}
	again := map[string]int{} // the one later generation an approval let through
	for _, r := range s.w.requests {
		if g, ok := hard[r.chargeID]; ok && r.gen > g {
			switch p, approved := s.w.represent[r.chargeID]; {
			case approved && (again[r.chargeID] == 0 || again[r.chargeID] == r.gen):
				again[r.chargeID] = r.gen
				s.saw("hard decline presented again by an approval")
				_ = p
			default:
				s.violate("(b) %s presented again under %s after a hard decline under generation %d (no approval marked it, or it was presented again before under generation %d)", r.chargeID, r.key, g, again[r.chargeID])
			}
		}
		if _, isHard := charge.HardDecline(r.declined); r.declined != "" && isHard {
			if _, ok := hard[r.chargeID]; !ok {
				hard[r.chargeID] = r.gen
			}
		}
	}
	// (c) every charge ends somewhere that is an end, or that something
	// brings back: the queue is drained, so a WAITING or IN_PROGRESS
	// record is stranded unless its message is on the DLQ.
	onDLQ := map[string]bool{}
	for _, m := range s.q.DLQ().Messages() {
		onDLQ[operate.ChargeIDOf(m.Body)] = true
	}
	if n := s.q.Len(); n > 0 {
		s.violate("(c) %d message(s) still on the queue at the end", n)
	}
	for _, c := range s.charges {
		rec, err := s.inner.Get(ctx, c.ID, s.now)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			if !onDLQ[c.ID] {
				s.violate("(c) %s has no record and no message: lost", c.ID)
			}
		case err != nil:
			s.violate("(c) %s: %v", c.ID, err)
		case rec.Summary != charge.SummaryOf(c).String():
			// (h) every record of a charge keeps, whatever moved it, the
			// summary its claim wrote: what reconciliation compares every
			// posting with.
			s.violate("(h) %s ends %s with summary %q, want %q", c.ID, rec.State, rec.Summary, charge.SummaryOf(c).String())
		}
		switch {
		case err != nil:
		case rec.State == driver.StateDone:
		case rec.State == driver.StateFailed:
			if rec.Status == "" || rec.Detail == "" {
				s.violate("(c) %s FAILED without a reason", c.ID)
			}
		case onDLQ[c.ID]:
			// On the DLQ: a person decides (redrive).
		default:
			lost := ""
			if n := s.q.Counts().Expired; n > 0 {
				lost = fmt.Sprintf(" (%d message(s) deleted by the queue's retention)", n)
			}
			s.violate("(c) %s ends %s (generation %d, until %s) with nothing to bring it back%s", c.ID, rec.State, rec.Generation, rec.LeaseUntil.Sub(s.start), lost)
		}
	}
	s.checkApprovals()
	// (f) a resolved break stays resolved: the statement reconciled once
	// more at the end has no break for a charge an operator collected.
	opts, read := s.reconcileOptions()
	rep, err := reconcile.Run(ctx, opts, read)
	if err != nil {
		s.violate("(f) the final reconciliation failed: %v", err)
		return
	}
	for _, b := range rep.Breaks {
		if _, ok := s.w.collected[b.ChargeID]; ok {
			s.violate("(f) %s was resolved as collected, and the statement shows a %s break again: %s; advice: %s", b.ChargeID, b.Kind, b.Detail, b.Action)
		}
	}
}
