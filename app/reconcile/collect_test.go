package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// Issue 50: a collection (resolve keeping the money of a posting the
// record does not hold) is one conditional write, driver.Collector. These
// tests drive the real stores and the bank simulator's ledger: every debit
// a delivery makes is a ledger posting, and a charge must have one.

// operatorStore is what the tests' store wrappers pass on: the store, its
// collect, and its listing (reconcile.Run walks the DONE records by it).
type operatorStore interface {
	driver.Store
	driver.Collector
	driver.StateLister
}

// collectStores are the stores the collection tests run on: the
// backends' memory and SQLite stores.
var collectStores = map[string]func(t *testing.T) operatorStore{
	"memory": operatorStoreOf("memory"),
	"sqlite": operatorStoreOf("sqlite"),
}

// operatorStoreOf opens the backend named as an operatorStore.
func operatorStoreOf(name string) func(t *testing.T) operatorStore {
	return func(t *testing.T) operatorStore { return backends[name](t).(operatorStore) }
}

// bankPosted is the bank's posting of c under generation gen after all:
// in its ledger, and so in the statement.
func bankPosted(t *testing.T, b *books, bank *corebanksim.Ledger, c charge.Charge, gen int) {
	t.Helper()
	if _, err := bank.Debit(t.Context(), c.DebitRequestFor(gen)); err != nil {
		t.Fatalf("the bank's posting of generation %d: %v", gen, err)
	}
	b.post(c, gen, c.Amount.Minor, true)
}

// deliver is the next delivery of c: a Guard.Do that debits the ledger
// under the run's generation.
func deliver(t *testing.T, b *books, bank *corebanksim.Ledger, c charge.Charge) idempotency.Outcome {
	t.Helper()
	res, err := b.guard.Do(t.Context(), c.ID, c.Fingerprint(b.fp), func(ctx context.Context, run idempotency.Run) (idempotency.Done, error) {
		r, err := bank.Debit(ctx, c.DebitRequestFor(run.Generation))
		if err != nil {
			return idempotency.Done{}, err
		}
		return idempotency.Done{Status: string(charge.Debited), Detail: r.Reference}, nil
	}, idempotency.DoOptions{})
	if err != nil {
		t.Fatalf("delivery of %s: %v", c.ID, err)
	}
	return res.Outcome
}

// postingsOf counts the ledger's postings of c, every generation.
func postingsOf(bank *corebanksim.Ledger, c charge.Charge) (n int, keys []string) {
	for _, e := range bank.Entries() {
		if id, _ := reconcile.SplitBankKey(e.IdempotencyKey); id == c.ID {
			n++
			keys = append(keys, e.IdempotencyKey)
		}
	}
	return n, keys
}

// faulty fails every write to key while armed: "never" before it reaches
// the store (an outage), "lost" after the store applied it (its answer
// lost). Collect, and the writes the adoption made before it (Finish to
// DONE, the put-back to WAITING), are what it fails; the resolution's own
// record (another key) is left alone.
type faulty struct {
	operatorStore
	key  string
	mode string // "", "never", "lost"
}

func (s *faulty) fault(ctx context.Context, key string, write func() error) error {
	if key != s.key || s.mode == "" {
		return write()
	}
	if s.mode == "lost" {
		if err := write(); err != nil {
			return err
		}
	}
	return driver.Unavailable("write", errors.New("connection reset by peer"))
}

func (s *faulty) Finish(ctx context.Context, f driver.FinishRequest) error {
	return s.fault(ctx, f.Key, func() error { return s.operatorStore.Finish(ctx, f) })
}

func (s *faulty) Collect(ctx context.Context, c driver.CollectRequest) (driver.Record, error) {
	var rec driver.Record
	err := s.fault(ctx, c.Key, func() error {
		var err error
		rec, err = s.operatorStore.Collect(ctx, c)
		return err
	})
	return rec, err
}

// An interrupted collection of a WAITING charge whose declined generation
// 1 the bank posted after all (the write never lands: an outage, resolve
// killed; or it lands and its answer is lost), then resolve run again,
// then the delivery after every lease and not-before: one posting in the
// ledger, the record DONE, and the break never marked resolved while the
// record is not DONE. Before collect, resolve claimed the record (IN_PROGRESS
// under generation 2), lost the DONE and the put-back, and the second run
// marked the break resolved over an IN_PROGRESS record that the next
// delivery debited under generation 2.
func TestInterruptedWaitingCollectionDebitsOnce(t *testing.T) {
	for name, open := range collectStores {
		for _, mode := range []string{"never", "lost"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				store := &faulty{operatorStore: open(t)}
				b := newBooks(t, store, "COLI-")
				bank := corebanksim.NewLedger(corebanksim.Faults{})
				c := b.charge("interrupted-"+mode, 2500)
				store.key = c.ID
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
				bankPosted(t, b, bank, c, 1)

				store.mode = mode
				if res, err := attackResolve(t, b, period, c.ID); err == nil {
					t.Fatalf("resolve with its write failing (%s): %s, no error", mode, res.Action)
				}
				store.mode = ""
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				rep := b.run(t)
				if rec.State != driver.StateDone && (rep.Resolved != 0 || findBreak(rep, c.ID) == nil) {
					t.Fatalf("after the interrupted resolve the record is %s generation %d and the break is closed (resolved %d, break %+v)",
						rec.State, rec.Generation, rep.Resolved, findBreak(rep, c.ID))
				}

				// resolve again: it collects (the write never landed) or
				// finds the collection recorded (no open break).
				res, err := attackResolve(t, b, period, c.ID)
				switch mode {
				case "never":
					if err != nil || res.Action != "adopted" {
						t.Fatalf("resolve again: %s %v; want the posting collected", res.Action, err)
					}
				case "lost":
					if !errors.Is(err, reconcile.ErrNoBreak) || !strings.Contains(err.Error(), "matches the statement") {
						t.Fatalf("resolve again after a collection that landed: %s %v; want no open break (the charge matches)", res.Action, err)
					}
				}
				rec, _ = b.store.Get(t.Context(), c.ID, b.clock.Now())
				if rec.State != driver.StateDone || rec.Generation != 1 {
					t.Fatalf("after resolve the record is %s generation %d; want DONE at the generation the bank posted (1)", rec.State, rec.Generation)
				}
				if rep := b.run(t); findBreak(rep, c.ID) != nil || rep.Matched != 1 {
					t.Fatalf("the statement again: break %+v, matched %d; want the charge matched", findBreak(rep, c.ID), rep.Matched)
				}

				// Every lease and the not-before pass; the next delivery comes.
				b.clock.Advance(25 * time.Hour)
				if out := deliver(t, b, bank, c); out != idempotency.DuplicateDone {
					t.Errorf("the delivery after the collection: %s; want a duplicate of a done charge", out)
				}
				if n, keys := postingsOf(bank, c); n != 1 {
					t.Fatalf("the ledger has %d postings of %s (%v): the customer was debited %d times", n, c.ID, keys, n)
				}
			})
		}
	}
}

// interleave holds resolve A (its context marked) at its first write to
// the charge's record — before it (A read the record, then waits) or after
// it — until resolve B has finished.
type interleave struct {
	operatorStore
	key     string
	after   bool
	reached chan struct{} // closed when A is held
	release chan struct{} // closed when B has finished
	once    sync.Once
}

type resolveA struct{}

func (s *interleave) hold(ctx context.Context, key string, write func() error) error {
	if key != s.key || ctx.Value(resolveA{}) == nil {
		return write()
	}
	held := false
	s.once.Do(func() { held = true })
	if !held {
		return write()
	}
	if s.after {
		err := write()
		close(s.reached)
		<-s.release
		return err
	}
	close(s.reached)
	<-s.release
	return write()
}

func (s *interleave) Claim(ctx context.Context, req driver.ClaimRequest) (res driver.ClaimResult, err error) {
	err = s.hold(ctx, req.Key, func() error { res, err = s.operatorStore.Claim(ctx, req); return err })
	return res, err
}

func (s *interleave) Reopen(ctx context.Context, req driver.ReopenRequest) (rec driver.Record, err error) {
	err = s.hold(ctx, req.Key, func() error { rec, err = s.operatorStore.Reopen(ctx, req); return err })
	return rec, err
}

func (s *interleave) Finish(ctx context.Context, req driver.FinishRequest) error {
	return s.hold(ctx, req.Key, func() error { return s.operatorStore.Finish(ctx, req) })
}

func (s *interleave) Collect(ctx context.Context, req driver.CollectRequest) (rec driver.Record, err error) {
	err = s.hold(ctx, req.Key, func() error { rec, err = s.operatorStore.Collect(ctx, req); return err })
	return rec, err
}

// Two resolves of one WAITING charge at once, in a forced interleaving:
// exactly one collects, the other gets an error that says why (the record
// changed since it read it, or the charge matches now), the record is DONE,
// and the next delivery does not debit: one posting in the ledger. Before
// collect, a resolve held after its claim let the other mark the break
// over the IN_PROGRESS record; with the claims racing, the second reclaimed
// the first's live lease and both failed, the record left to a delivery
// that debited generation 2.
func TestConcurrentResolvesOfAWaitingChargeCollectOnce(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name  string
			after bool
			// The error the resolve that loses gets.
			loser error
			words string
		}{
			{"A held between its read and its write", false, reconcile.ErrChanged, "changed since it was read"},
			{"A held after its first write", true, reconcile.ErrNoBreak, "matches the statement"},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				store := &interleave{operatorStore: open(t), after: tc.after, reached: make(chan struct{}), release: make(chan struct{})}
				b := newBooks(t, store, "COLC-")
				bank := corebanksim.NewLedger(corebanksim.Faults{})
				c := b.charge("twice", 2500)
				store.key = c.ID
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
				bankPosted(t, b, bank, c, 1)

				type result struct {
					res reconcile.Resolved
					err error
				}
				aDone := make(chan result, 1)
				go func() {
					ctx := context.WithValue(t.Context(), resolveA{}, true)
					res, err := reconcile.Resolve(ctx, reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
						reconcile.ResolveRequest{ChargeID: c.ID, Reason: "the bank posted generation 1", Operator: "alice", Guard: b.guard})
					aDone <- result{res, err}
				}()
				select {
				case <-store.reached:
				case r := <-aDone:
					t.Fatalf("resolve A finished without writing the record: %s %v", r.res.Action, r.err)
				}
				bres, berr := reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
					reconcile.ResolveRequest{ChargeID: c.ID, Reason: "the bank posted generation 1", Operator: "bob", Guard: b.guard})
				close(store.release)
				a := <-aDone

				winner, loser, lerr := a.res, bres, berr
				if tc.after {
					if a.err != nil {
						t.Errorf("resolve A (its collection first): %v", a.err)
					}
				} else {
					winner, loser, lerr = bres, a.res, a.err
					if berr != nil {
						t.Errorf("resolve B (its collection first): %v", berr)
					}
				}
				if winner.Action != "adopted" {
					t.Errorf("the first resolve: %q; want the posting collected (adopted)", winner.Action)
				}
				if !errors.Is(lerr, tc.loser) || !strings.Contains(lerr.Error(), tc.words) {
					t.Errorf("the second resolve: %q, %v; want an error saying %q", loser.Action, lerr, tc.words)
				}
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if rec.State != driver.StateDone || rec.Generation != 1 {
					t.Fatalf("the record is %s generation %d; want DONE at generation 1 (collected)", rec.State, rec.Generation)
				}
				b.clock.Advance(25 * time.Hour)
				if out := deliver(t, b, bank, c); out != idempotency.DuplicateDone {
					t.Errorf("the delivery after the collection: %s; want a duplicate of a done charge", out)
				}
				if n, keys := postingsOf(bank, c); n != 1 {
					t.Fatalf("the ledger has %d postings of %s (%v): the customer was debited %d times", n, c.ID, keys, n)
				}
			})
		}
	}
}

// declinedAgainAtGeneration2 is a charge declined under generation 1
// (FAILED), reopened by an operator into generation 2, and declined again:
// FAILED at generation 2.
func (b *books) declinedAgainAtGeneration2(t *testing.T, c charge.Charge) {
	t.Helper()
	b.atGeneration2(t, c, b.failed, driver.StateFailed)
}

// collectedBeforeCollect is c declined again at generation 2 and collected
// the way it was before collect wrote the posted generation: DONE at
// generation 2, its adoption line naming generation 1's posting (whose
// bank key it returns).
func (b *books) collectedBeforeCollect(t *testing.T, c charge.Charge) (bankKey string) {
	t.Helper()
	b.declinedAgainAtGeneration2(t, c)
	p := b.post(c, 1, c.Amount.Minor, true)
	rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
	now := b.clock.Now()
	line := reconcile.AdoptedLine + " " + now.Format(time.RFC3339) + " by op: posted " + p.Amount.String() + " under " + p.BankKey +
		", booked " + p.BookingDate.Format(time.DateOnly) + ", reference " + p.Reference + "; no debit; why: old"
	if _, err := b.store.(driver.Collector).Collect(t.Context(), driver.CollectRequest{Key: c.ID, From: driver.StateFailed, Token: rec.Token, Generation: 2,
		NewToken: "legacy", PostedGeneration: 2, Status: string(charge.Debited), Detail: p.Reference,
		History: append(rec.History, line), Now: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return p.BankKey
}

// A failed_but_posted break collected under a later generation — from
// WAITING, from FAILED after a declined reopen — does not come back when
// the same statement is reconciled again: the charge matches (its record
// names the posting collected), and nothing is advised (before, it came
// back under a new id advising resolve --refunded: a refund of money just
// recorded as collected). A record collected before collect wrote the
// posted generation (DONE at generation 2, its history naming the
// posting) matches too.
func TestCollectedLaterGenerationBreakDoesNotComeBack(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name  string
			setup func(t *testing.T, b *books, c charge.Charge)
		}{
			{"from WAITING", func(t *testing.T, b *books, c charge.Charge) {
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
			}},
			{"from FAILED after a declined reopen", func(t *testing.T, b *books, c charge.Charge) {
				b.declinedAgainAtGeneration2(t, c)
			}},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "COLG-")
				bank := corebanksim.NewLedger(corebanksim.Faults{})
				c := b.charge("later", 2500)
				other := b.charge("other", 4000) // a charge that matches, to count
				b.done(t, other)
				b.post(other, 1, other.Amount.Minor, true)
				tc.setup(t, b, c)
				bankPosted(t, b, bank, c, 1)

				rep := b.run(t)
				if br := findBreak(rep, c.ID); br == nil || br.Kind != reconcile.FailedButPosted || len(rep.Breaks) != 1 || rep.Matched != 1 {
					t.Fatalf("before: breaks %v matched %d; want one failed_but_posted for %s, one charge matched", b.mine(rep), rep.Matched, c.ID)
				}
				if res, err := attackResolve(t, b, period, c.ID); err != nil || res.Action != "adopted" {
					t.Fatalf("resolve: %s %v", res.Action, err)
				}
				rep = b.run(t)
				if br := findBreak(rep, c.ID); br != nil {
					t.Fatalf("the same statement again: %s is a %s break (id %s) advising %q; want it matched", c.ID, br.Kind, br.ID, br.Action)
				}
				if len(rep.Breaks) != 0 || rep.Matched != 2 || rep.Resolved != 0 {
					t.Fatalf("the same statement again: breaks %v, matched %d, resolved %d; want none, 2, 0 (the collected charge matches)", b.mine(rep), rep.Matched, rep.Resolved)
				}
				if _, err := attackResolve(t, b, period, c.ID); !errors.Is(err, reconcile.ErrNoBreak) {
					t.Fatalf("resolve again: %v; want no open break", err)
				}
			})
		}
		// A record collected before collect existed: DONE at generation
		// 2, its adoption line naming generation 1's posting.
		t.Run(name+"/collected before collect wrote the posted generation", func(t *testing.T) {
			b := newBooks(t, open(t), "COLG-")
			c := b.charge("legacy", 2500)
			b.collectedBeforeCollect(t, c)
			if rep := b.run(t); findBreak(rep, c.ID) != nil || rep.Matched != 1 {
				t.Fatalf("a record collected under generation 1's key and left at generation 2: breaks %v, matched %d; want it matched", b.mine(rep), rep.Matched)
			}
		})
	}
}

// A failed_but_posted break whose record cannot be collected now — a
// delivery holds it under a live lease, debiting generation 2 — is
// refused, with why and what to do, and stays open; it was marked
// resolved, the posting recorded nowhere. --refunded marks it.
func TestFailedButPostedOverALiveLeaseIsRefused(t *testing.T) {
	b, c := oneCharge(t, "COLL-", "live", (*books).failed)
	if _, err := b.guard.Reopen(t.Context(), c.ID, "the customer paid in", idempotency.ReopenOptions{NewGeneration: true, Operator: "op"}); err != nil {
		t.Fatal(err)
	}
	b.claimed(t, c) // a delivery debiting generation 2 now
	b.post(c, 1, c.Amount.Minor, true)

	res, err := attackResolve(t, b, period, c.ID)
	if !errors.Is(err, reconcile.ErrNotCollectable) || !strings.Contains(err.Error(), "--refunded") || res.Action != "" {
		t.Fatalf("resolve of a posting whose record a delivery holds: %q %v; want it refused, saying what to do", res.Action, err)
	}
	rep := b.run(t)
	if br := findBreak(rep, c.ID); br == nil || br.Kind != reconcile.FailedButPosted || rep.Resolved != 0 {
		t.Fatalf("after the refusal: break %+v, resolved %d; want the break open", br, rep.Resolved)
	}
	res, err = reconcile.Resolve(t.Context(), reconcile.Options{Store: b.store, Fingerprints: b.fp, Period: period, Now: b.clock.Now()}, b.postings_(),
		reconcile.ResolveRequest{ChargeID: c.ID, Reason: "the bank refunded it", Operator: "op", Guard: b.guard, Refunded: true})
	if err != nil || res.Action != "marked" {
		t.Fatalf("resolve --refunded: %q %v", res.Action, err)
	}
}

// A store without driver.Collector cannot record a collection in one
// write: resolve says so, and writes nothing.
func TestCollectNeedsACollector(t *testing.T) {
	type plain struct {
		driver.Store
		driver.StateLister
	}
	m := memstore.New()
	b := newBooks(t, plain{m, m}, "COLN-")
	c := b.waiting(t, "plain")
	before, _ := m.Get(t.Context(), c.ID, b.clock.Now())
	b.post(c, 1, c.Amount.Minor, true)
	if _, err := attackResolve(t, b, period, c.ID); err == nil || !strings.Contains(err.Error(), "driver.Collector") {
		t.Fatalf("resolve on a store without Collect: %v; want a clear error", err)
	}
	if after, _ := m.Get(t.Context(), c.ID, b.clock.Now()); after.State != driver.StateWaiting || after.Token != before.Token || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("the record is %s (was %s): want it untouched", after.State, before.State)
	}
}

// A posted_twice break of a record still open to a debit is closed by
// collecting one posting (Break.Collects: four-eyes' reconcile-adopt asks
// a second operator for it); of a DONE record it is only marked; an
// amount_mismatch is never collected.
func TestWhatResolvingCollects(t *testing.T) {
	for _, tc := range []struct {
		kind            reconcile.Kind
		open, mismatch  bool
		refunded, wants bool
	}{
		{reconcile.PostedNotRecorded, false, false, false, true},
		{reconcile.FailedButPosted, false, false, false, true},
		{reconcile.FailedButPosted, false, false, true, false},
		{reconcile.PostedTwice, true, false, false, true},
		{reconcile.PostedTwice, true, false, true, false},
		{reconcile.PostedTwice, false, false, false, false},
		{reconcile.AmountMismatch, true, true, false, false},
		{reconcile.RecordedNotPosted, false, false, false, false},
	} {
		b := reconcile.BreakForTest(tc.kind, tc.open, tc.mismatch)
		if got := b.Collects(tc.refunded); got != tc.wants {
			t.Errorf("%s (open %v, mismatch %v, refunded %v): Collects %v, want %v", tc.kind, tc.open, tc.mismatch, tc.refunded, got, tc.wants)
		}
	}
}

// Attack (issue 50): a record collected before collect wrote the posted
// generation is DONE at generation 2 with its adoption line naming
// generation 1's posting (~1). judge trusts the line only when the single
// posting IS that key; when the statement's single posting is generation
// 2's (~2: the zombie delivery of generation 2 the collect raced did post,
// booked in the next period), current falls back to the record's
// generation, ~2 "matches", and a second debit of the customer is counted
// as matched: no break. The record says it holds ~1's money, not ~2's.
func TestAttack50LegacyCollectedRecordMatchesAnotherGenerationsPosting(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			b := newBooks(t, s, "A50L-")
			c := b.charge("legacy", 2500)
			key1 := b.collectedBeforeCollect(t, c)
			// The next statement: generation 1's posting was last period's;
			// this one has generation 2's alone.
			b.postings = nil
			b.post(c, 2, c.Amount.Minor, true)
			rep := b.run(t)
			if findBreak(rep, c.ID) == nil {
				t.Fatalf("record DONE holding %s's posting (its adoption line), the statement posts %s too: breaks %v, matched %d; "+
					"want a break (a second debit), not a match", key1, charge.BankKey(c.ID, 2), b.mine(rep), rep.Matched)
			}
		})
	}
}

// Attack (issue 50): a failed_but_posted break under a declined (earlier)
// generation is judged without checking the posting against the charge:
// the branch for p.BankKey != current never calls verify, and never sets
// Unverified. A posting under the declined key of ANOTHER amount (the
// narrative is there: it can be checked) is a failed_but_posted break, not
// an amount_mismatch, and resolve collects it: the record is DONE "posted"
// with the wrong amount recorded as the charge's collection. The same
// posting under the record's own generation is an amount_mismatch (and
// is not adopted).
//
// Under a WAITING record (attack 3g, issue 52) resolve does record it as
// collected — else the schedule's next attempt debits the customer again
// while the bank corrects the amount — but never as the charge's amount:
// the next run reports amount_mismatch on the DONE record until the bank's
// correction matches.
func TestAttack50DeclinedGenerationPostingOfAnotherAmountIsCollectedUnchecked(t *testing.T) {
	for name, open := range collectStores {
		for _, tc := range []struct {
			name    string
			setup   func(t *testing.T, b *books, c charge.Charge)
			collect bool // resolve collects it (the record WAITING)
		}{
			{"WAITING", func(t *testing.T, b *books, c charge.Charge) {
				b.declinedAndWaiting(t, c, b.clock.Now().Add(24*time.Hour))
			}, true},
			{"FAILED after a declined reopen", func(t *testing.T, b *books, c charge.Charge) {
				b.declinedAgainAtGeneration2(t, c)
			}, false},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				b := newBooks(t, open(t), "A50M-")
				c := b.charge("amount", 2500)
				tc.setup(t, b, c)
				b.post(c, 1, 999900, true) // 9999.00, not 25.00, under generation 1's key, narrative and all
				rep := b.run(t)
				br := findBreak(rep, c.ID)
				if br == nil {
					t.Fatalf("no break: %v", b.mine(rep))
				}
				res, err := attackResolve(t, b, period, c.ID)
				rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
				if br.Kind != reconcile.AmountMismatch || (res.Action == "adopted") != tc.collect {
					t.Fatalf("a posting of 9999.00 for a 25.00 charge under its declined key: break %s (unverified %v); resolve %q %v; record %s %s %q; "+
						"want amount_mismatch, collected: %v", br.Kind, br.Unverified, res.Action, err, rec.State, rec.Status, rec.Detail, tc.collect)
				}
				if again := findBreak(b.run(t), c.ID); tc.collect && (again == nil || again.Kind != reconcile.AmountMismatch) {
					t.Fatalf("collected, the posting of 9999.00 is no longer a break (%v): taken for the charge's amount", again)
				}
			})
		}
	}
}

// The same branch never sets Unverified either: a posting under the
// declined key WITHOUT a narrative (it cannot be checked against the
// charge) is collected by a plain resolve, without the operator's
// --unverified (the same-generation FAILED case asks for it).
func TestAttack50DeclinedGenerationPostingWithoutNarrativeNeedsNoUnverified(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A50U-")
			c := b.waiting(t, "bare")
			b.post(c, 1, c.Amount.Minor, false)
			res, err := attackResolve(t, b, period, c.ID)
			if !errors.Is(err, reconcile.ErrUnchecked) {
				t.Fatalf("resolve of an uncheckable posting under the declined key, no --unverified: %q %v (unverified %v); want ErrUnchecked",
					res.Action, err, res.Break.Unverified)
			}
		})
	}
}

// A posting under a generation the record never reached (~3, the record
// FAILED at generation 1: the collector never sent that key) is judged
// failed_but_posted "which it had declined" and resolve collects it: the
// record jumps to DONE at generation 3, closing the charge on a debit it
// never presented (the run reports such a key as unknown_posting when no
// record exists).
func TestAttack50PostingUnderAGenerationNeverPresentedIsCollected(t *testing.T) {
	for name, open := range collectStores {
		t.Run(name, func(t *testing.T) {
			b := newBooks(t, open(t), "A50F-")
			c := b.charge("future", 2500)
			b.failed(t, c) // declined at generation 1; never reopened
			b.post(c, 3, c.Amount.Minor, true)
			rep := b.run(t)
			br := findBreak(rep, c.ID)
			if br == nil {
				br = &reconcile.Break{}
			}
			res, err := attackResolve(t, b, period, c.ID)
			rec, _ := b.store.Get(t.Context(), c.ID, b.clock.Now())
			if res.Action == "adopted" || rec.State == driver.StateDone {
				t.Fatalf("posting under %s, a key never sent (record at generation 1): break %s %q; resolve %q %v; record %s generation %d; want it not collected",
					charge.BankKey(c.ID, 3), br.Kind, br.Detail, res.Action, err, rec.State, rec.Generation)
			}
		})
	}
}
