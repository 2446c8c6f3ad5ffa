package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The linearizability check: concurrent clients drive a store with claims,
// extensions and finishes on a few hot keys, every call and return is
// recorded, and porcupine decides whether the history is equivalent to some
// sequential run of the state machine — the one in idempotency/driver,
// whose request predicates (ClaimRequest.Allows, FinishRequest.Allows and
// Landed, ExtendRequest.Allows) are the model's rules, so there is no
// second encoding of them.

// linInput is one call: the operation and its request.
type linInput struct {
	op     driver.Op
	key    string
	claim  driver.ClaimRequest
	finish driver.FinishRequest
	extend driver.ExtendRequest
}

// linOutput is what the store answered; unknown when the answer was lost
// (the call may or may not have taken effect).
type linOutput struct {
	unknown bool
	err     error // nil, ErrLeaseLost
	claim   driver.ClaimResult
}

// modelRecord is the part of a record the state machine decides on.
type modelRecord struct {
	state       driver.State
	token       string
	fingerprint string
	leaseUntil  int64
	expiresAt   int64
	attempt     int
}

func (m *modelRecord) record() driver.Record {
	if m == nil {
		return driver.Record{}
	}
	return driver.Record{State: m.state, Token: m.token, Fingerprint: m.fingerprint, Attempt: m.attempt,
		LeaseUntil: time.Unix(0, m.leaseUntil), ExpiresAt: time.Unix(0, m.expiresAt)}
}

// ClaimModel is the sequential specification of one key's record, for
// porcupine: its state is *modelRecord (nil: absent), its inputs linInput,
// its outputs linOutput. Histories are partitioned by key.
var ClaimModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(linInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return (*modelRecord)(nil) },
	Step: func(state, input, output any) (bool, any) {
		cur, in, out := state.(*modelRecord), input.(linInput), output.(linOutput)
		next, want := step(cur, in)
		if out.unknown {
			// It may have taken effect; had it not, the linearization can
			// place it after every other call.
			return true, next
		}
		return matches(in, want, out), next
	},
	Equal: func(a, b any) bool {
		x, y := a.(*modelRecord), b.(*modelRecord)
		if x == nil || y == nil {
			return x == y
		}
		return *x == *y
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		res := "?"
		switch {
		case out.unknown:
			res = "unknown (answer lost)"
		case out.err != nil:
			res = out.err.Error()
		case in.op == driver.OpClaim && out.claim.Acquired:
			res = fmt.Sprintf("acquired (reclaimed %v, attempt %d)", out.claim.Reclaimed, out.claim.Record.Attempt)
		case in.op == driver.OpClaim:
			res = fmt.Sprintf("refused: %s %s attempt %d lease %d", out.claim.Record.State, short(out.claim.Record.Token), out.claim.Record.Attempt, out.claim.Record.LeaseUntil.UnixMilli()%100000)
		default:
			res = "ok"
		}
		switch in.op {
		case driver.OpClaim:
			return fmt.Sprintf("%s claim %s expiredBy=%d → %s", in.key, short(in.claim.Token), in.claim.LeaseExpiredBy.UnixMilli()%100000, res)
		case driver.OpExtend:
			return fmt.Sprintf("%s extend %s → %s", in.key, short(in.extend.Token), res)
		default:
			return fmt.Sprintf("%s %s %s → %s", in.key, in.op, short(in.finish.Token), res)
		}
	},
	DescribeState: func(state any) string {
		m := state.(*modelRecord)
		if m == nil {
			return "absent"
		}
		return fmt.Sprintf("%s %s lease %d attempt %d", m.state, short(m.token), m.leaseUntil/1e6%100000, m.attempt)
	},
}

func short(s string) string {
	if len(s) > 6 {
		return s[:6]
	}
	return s
}

// expected is what the sequential machine answers.
type expected struct {
	err       error
	acquired  bool
	reclaimed bool
	existing  *modelRecord // a refused claim's record
	attempt   int
}

// step applies in to cur by the driver's rules and says what the answer
// must be.
func step(cur *modelRecord, in linInput) (*modelRecord, expected) {
	switch in.op {
	case driver.OpClaim:
		req := in.claim
		if cur == nil || cur.record().Expired(req.Now) {
			return &modelRecord{state: driver.StateInProgress, token: req.Token, fingerprint: req.Fingerprint,
				leaseUntil: req.LeaseUntil.UnixNano(), expiresAt: req.ExpiresAt.UnixNano(), attempt: 1}, expected{acquired: true, attempt: 1}
		}
		if req.Allows(cur.record()) {
			n := *cur
			n.token, n.leaseUntil, n.expiresAt, n.attempt = req.Token, req.LeaseUntil.UnixNano(), req.ExpiresAt.UnixNano(), cur.attempt+1
			return &n, expected{acquired: true, reclaimed: true, attempt: n.attempt}
		}
		return cur, expected{existing: cur}
	case driver.OpExtend:
		if cur == nil || cur.record().Expired(in.extend.Now) || !in.extend.Allows(cur.record()) {
			return cur, expected{err: driver.ErrLeaseLost}
		}
		n := *cur
		n.leaseUntil = in.extend.LeaseUntil.UnixNano()
		return &n, expected{}
	default: // finish
		req := in.finish
		if cur == nil || cur.record().Expired(req.Now) {
			return cur, expected{err: driver.ErrLeaseLost}
		}
		if req.Landed(cur.record()) {
			return cur, expected{}
		}
		if !req.Allows(cur.record()) {
			return cur, expected{err: driver.ErrLeaseLost}
		}
		n := *cur
		n.state, n.expiresAt = req.State, req.ExpiresAt.UnixNano()
		return &n, expected{}
	}
}

func matches(in linInput, want expected, out linOutput) bool {
	if in.op != driver.OpClaim {
		return errors.Is(out.err, driver.ErrLeaseLost) == (want.err != nil) && (out.err == nil || want.err != nil)
	}
	if out.err != nil || out.claim.Acquired != want.acquired {
		return false
	}
	if want.acquired {
		return out.claim.Reclaimed == want.reclaimed && out.claim.Record.Token == in.claim.Token && out.claim.Record.Attempt == want.attempt
	}
	r := out.claim.Record
	return r.State == want.existing.state && r.Token == want.existing.token && r.Attempt == want.existing.attempt
}

// LinearizableOptions size a run of Linearizable.
type LinearizableOptions struct {
	// Histories to record and check. Default 100.
	Histories int
	// Clients at once, Keys they share, Ops per client per history.
	// Defaults 6, 2, 12.
	Clients, Keys, Ops int
	// LoseAnswers is the fraction of calls whose answer is lost after the
	// store applied them (the call is then of unknown outcome). Default 0.1.
	LoseAnswers float64
	// Timeout per history for the checker. Default 10s.
	Timeout time.Duration
}

func (o LinearizableOptions) withDefaults() LinearizableOptions {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Histories, 100)
	def(&o.Clients, 6)
	def(&o.Keys, 2)
	def(&o.Ops, 12)
	if o.LoseAnswers == 0 {
		o.LoseAnswers = 0.1
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	return o
}

// FindNonLinearizable records up to o.Histories histories, each on a new
// store from newStore, and returns the path of porcupine's visualisation of
// the first one that is not linearizable ("" when all are).
func FindNonLinearizable(ctx context.Context, newStore func() driver.Store, o LinearizableOptions) (string, error) {
	o = o.withDefaults()
	for h := range o.Histories {
		history := RecordHistory(ctx, newStore(), fmt.Sprintf("k%d", h), o, rand.New(rand.NewPCG(uint64(h), 7)))
		res, info := porcupine.CheckOperationsVerbose(ClaimModel, history, o.Timeout)
		if res == porcupine.Illegal {
			return visualise(info)
		}
	}
	return "", nil
}

// visualise writes porcupine's HTML picture of a checked history to a new
// file in the temporary directory and returns its path.
func visualise(info porcupine.LinearizationInfo) (string, error) {
	f, err := os.CreateTemp("", "linearizability-*.html")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return f.Name(), porcupine.Visualize(ClaimModel, info, f)
}

// Linearizable records o.Histories concurrent histories against newStore
// and fails the test at the first one porcupine finds not linearizable,
// writing porcupine's visualisation of it to a file named in the failure.
func Linearizable(t *testing.T, newStore func(t *testing.T) driver.Store, o LinearizableOptions) {
	t.Helper()
	o = o.withDefaults()
	s := newStore(t)
	seen := map[string]int{}
	start := time.Now()
	ops := 0
	for h := range o.Histories {
		history := RecordHistory(t.Context(), s, uniqueKey(t)+fmt.Sprint(h), o, rand.New(rand.NewPCG(uint64(h), uint64(time.Now().UnixNano()))))
		ops += len(history)
		for _, op := range history {
			seen[kind(op)]++
		}
		res, info := porcupine.CheckOperationsVerbose(ClaimModel, history, o.Timeout)
		switch res {
		case porcupine.Ok:
		case porcupine.Illegal:
			path, err := visualise(info)
			if err != nil {
				t.Logf("visualisation: %v", err)
			}
			if testing.Verbose() {
				ops := slices.SortedFunc(slices.Values(history), func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
				for _, op := range ops {
					ret := fmt.Sprint(op.Return)
					if op.Return == math.MaxInt64 {
						ret = "∞"
					}
					t.Logf("client %d [%d, %s] %s", op.ClientId, op.Call, ret, ClaimModel.DescribeOperation(op.Input, op.Output))
				}
			}
			t.Fatalf("history %d (%d operations) is not linearizable; see %s", h, len(history), path)
		default:
			t.Fatalf("history %d: the checker gave up after %s (%d operations): make the histories smaller", h, o.Timeout, len(history))
		}
	}
	t.Logf("%d histories, %d operations, linearizable, %s: %v", o.Histories, ops, time.Since(start).Round(time.Millisecond), seen)
	// A run that never reclaimed, fenced or lost an answer checked nothing
	// that matters.
	for _, k := range []string{"acquired", "reclaimed", "refused", "lease lost", "finished", "unknown"} {
		if seen[k] == 0 {
			t.Errorf("no %q call in %d histories: the workload does not exercise the state machine (%v)", k, o.Histories, seen)
		}
	}
}

// kind names what a recorded call did, for the run's tally.
func kind(op porcupine.Operation) string {
	in, out := op.Input.(linInput), op.Output.(linOutput)
	switch {
	case out.unknown:
		return "unknown"
	case errors.Is(out.err, driver.ErrLeaseLost):
		return "lease lost"
	case in.op != driver.OpClaim:
		if in.op == driver.OpExtend {
			return "extended"
		}
		return "finished"
	case out.claim.Reclaimed:
		return "reclaimed"
	case out.claim.Acquired:
		return "acquired"
	}
	return "refused"
}

// RecordHistory runs o.Clients clients at once on o.Keys keys of prefix and
// returns every call with its answer. Each client has its own clock, offset
// within a few milliseconds of the others (the leases are a few
// milliseconds too, so that expiries, reclaims and fenced finishes happen),
// abandons a lease now and then (never finishes it) and loses a fraction of
// the store's answers after the call took effect.
func RecordHistory(ctx context.Context, s driver.Store, prefix string, o LinearizableOptions, rng *rand.Rand) []porcupine.Operation {
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		seq     atomic.Int64
		base    = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		wg      sync.WaitGroup
	)
	seeds := make([]uint64, o.Clients)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	for c := range o.Clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seeds[c], uint64(c)))
			offset := time.Duration(r.IntN(3)) * time.Millisecond // clocks disagree by up to 2 ms
			now := func(step int) time.Time { return base.Add(offset + time.Duration(step)*time.Millisecond) }
			fp := "fp-A"
			held := map[string]string{} // key → token this client believes it holds
			for i := range o.Ops {
				key := fmt.Sprintf("%s-%d", prefix, r.IntN(o.Keys))
				t := now(i * 2)
				var in linInput
				switch tok, ok := held[key]; {
				case ok && r.IntN(4) == 0:
					in = linInput{op: driver.OpExtend, key: key, extend: driver.ExtendRequest{Key: key, Token: tok, Now: t, LeaseUntil: t.Add(5 * time.Millisecond)}}
				case ok && r.IntN(5) != 0:
					st := driver.StateDone
					if r.IntN(4) == 0 {
						st = driver.StateFailed
					}
					op := driver.OpComplete
					if st == driver.StateFailed {
						op = driver.OpFail
					}
					in = linInput{op: op, key: key, finish: driver.FinishRequest{Key: key, Token: tok, State: st, Status: string(st), Now: t, ExpiresAt: t.Add(time.Hour)}}
					delete(held, key)
				default:
					if ok {
						delete(held, key) // abandon it: a worker that vanished
					}
					tok := fmt.Sprintf("c%d-%d-%x", c, i, r.Uint32())
					in = linInput{op: driver.OpClaim, key: key, claim: driver.ClaimRequest{Key: key, Token: tok, Fingerprint: fp,
						Now: t, LeaseExpiredBy: t, LeaseUntil: t.Add(3 * time.Millisecond), ExpiresAt: t.Add(time.Hour)}}
				}
				call := seq.Add(1)
				var out linOutput
				var err error
				switch in.op {
				case driver.OpClaim:
					out.claim, err = s.Claim(ctx, in.claim)
					if err == nil && out.claim.Acquired {
						held[key] = in.claim.Token
					}
				case driver.OpExtend:
					err = s.Extend(ctx, in.extend)
				default:
					err = s.Finish(ctx, in.finish)
				}
				ret := seq.Add(1)
				lose := r.Float64() < o.LoseAnswers
				switch {
				case err == nil && lose, err != nil && !errors.Is(err, driver.ErrLeaseLost):
					// Lost after it was applied, or a store error: of unknown
					// outcome, as far as anyone will ever know.
					out = linOutput{unknown: true}
					ret = math.MaxInt64
					if in.op == driver.OpClaim {
						delete(held, key) // we do not know we hold it
					}
				default:
					out.err = err
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return history
}
