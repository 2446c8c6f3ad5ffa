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
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// The linearizability check: concurrent clients drive a store with claims,
// extensions, finishes, operators' reopens and collects and reads on a few hot keys, every call and return is
// recorded, and porcupine decides whether the history is equivalent to some
// sequential run of the state machine — the one in idempotency/driver,
// whose request predicates (ClaimRequest.Allows, FinishRequest.Allows and
// Landed, ExtendRequest.Allows, ReopenRequest.Allows, CollectRequest.Allows
// and Landed) are the model's
// rules, so there is no second encoding of them.

// opGet is a read (Store.Get): not a transition, so not a driver.Op.
const opGet driver.Op = "get"

// linInput is one call: the operation and its request.
type linInput struct {
	op     driver.Op
	key    string
	claim  driver.ClaimRequest
	finish driver.FinishRequest
	extend driver.ExtendRequest
	reopen driver.ReopenRequest
	coll   driver.CollectRequest
	now    time.Time // a read's
}

// linOutput is what the store answered; unknown when the answer was lost
// (the call may or may not have taken effect).
type linOutput struct {
	unknown bool
	err     error // nil, ErrLeaseLost, ErrNotFound, ErrNotFailed, ErrStale
	claim   driver.ClaimResult
	rec     driver.Record // what a reopen, a collect or a read returned
}

// modelRecord is the part of a record the state machine decides on.
type modelRecord struct {
	state       driver.State
	token       string
	fingerprint string
	leaseUntil  int64
	expiresAt   int64
	attempt     int
	reopens     int
	generation  int
	summary     string
}

func (m *modelRecord) record() driver.Record {
	if m == nil {
		return driver.Record{}
	}
	return driver.Record{State: m.state, Token: m.token, Fingerprint: m.fingerprint, Attempt: m.attempt, Reopens: m.reopens,
		LeaseUntil: time.Unix(0, m.leaseUntil), ExpiresAt: time.Unix(0, m.expiresAt), Generation: m.generation, Summary: m.summary}
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
			res = "refused: " + describeRecord(out.claim.Record)
		case in.op == driver.OpReopen || in.op == driver.OpCollect || in.op == opGet:
			res = describeRecord(out.rec)
		default:
			res = "ok"
		}
		switch in.op {
		case driver.OpClaim:
			return fmt.Sprintf("%s claim %s %s expiredBy=%d → %s", in.key, short(in.claim.Token), in.claim.Fingerprint, in.claim.LeaseExpiredBy.UnixMilli()%100000, res)
		case driver.OpReopen:
			return fmt.Sprintf("%s reopen %s prev=%q → %s", in.key, short(in.reopen.Token), short(in.reopen.PrevToken), res)
		case driver.OpCollect:
			return fmt.Sprintf("%s collect %s from %s %s gen %d → %s", in.key, short(in.coll.NewToken), in.coll.From, short(in.coll.Token), in.coll.Generation, res)
		case opGet:
			return fmt.Sprintf("%s get → %s", in.key, res)
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

func describeRecord(r driver.Record) string {
	return fmt.Sprintf("%s %s %s attempt %d reopens %d lease %d", r.State, short(r.Token), r.Fingerprint, r.Attempt, r.Reopens, r.LeaseUntil.UnixMilli()%100000)
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
	existing  *modelRecord // a refused claim's or reopen's record, a read's
	attempt   int
	summary   string // an acquired claim's
}

// Modelled says, for every write of driver.Ops, how the model holds it: a
// case of step, or why not (TestTheModelHasEveryOp: a new write needs an
// entry here before it ships).
var Modelled = map[driver.Op]string{
	driver.OpClaim:    "step: claim",
	driver.OpExtend:   "step: extend",
	driver.OpComplete: "step: finish",
	driver.OpFail:     "step: finish",
	driver.OpWait:     "step: finish",
	driver.OpReopen:   "step: reopen",
	driver.OpCollect:  "step: collect",
	driver.OpAmend:    "not modelled: an operator's DONE → DONE status change under the token and status read; the conformance rows cover it",
}

// step applies in to cur by the driver's rules and says what the answer
// must be.
func step(cur *modelRecord, in linInput) (*modelRecord, expected) {
	switch in.op {
	case driver.OpClaim:
		req := in.claim
		if cur == nil || cur.record().Expired(req.Now) {
			return &modelRecord{state: driver.StateInProgress, token: req.Token, fingerprint: req.Fingerprint,
					leaseUntil: req.LeaseUntil.UnixNano(), expiresAt: req.ExpiresAt.UnixNano(), attempt: 1, generation: 1, summary: req.Summary},
				expected{acquired: true, attempt: 1, summary: req.Summary}
		}
		if req.Allows(cur.record()) {
			// A reclaim of an IN_PROGRESS claim, or the resume of a WAITING
			// record that is due (not a reclaim: its run ended cleanly).
			n := *cur
			n.state, n.token, n.leaseUntil, n.expiresAt, n.attempt = driver.StateInProgress, req.Token, req.LeaseUntil.UnixNano(), req.ExpiresAt.UnixNano(), cur.attempt+1
			n.summary = req.SummaryOver(cur.record())
			return &n, expected{acquired: true, reclaimed: req.Reclaims(cur.record()), attempt: n.attempt, summary: n.summary}
		}
		return cur, expected{existing: cur}
	case driver.OpExtend:
		if cur == nil || cur.record().Expired(in.extend.Now) || !in.extend.Allows(cur.record()) {
			return cur, expected{err: driver.ErrLeaseLost}
		}
		n := *cur
		n.leaseUntil = in.extend.LeaseUntil.UnixNano()
		return &n, expected{}
	case driver.OpReopen:
		req := in.reopen
		if cur == nil || cur.record().Expired(req.Now) {
			return cur, expected{err: driver.ErrNotFound}
		}
		if !req.Allows(cur.record()) {
			return cur, expected{err: driver.ErrNotFailed, existing: cur}
		}
		n := *cur
		n.state, n.token, n.leaseUntil, n.expiresAt, n.reopens = driver.StateInProgress, req.Token, req.LeaseUntil.UnixNano(), req.ExpiresAt.UnixNano(), cur.reopens+1
		return &n, expected{existing: &n}
	case driver.OpCollect:
		req := in.coll
		if cur == nil || cur.record().Expired(req.Now) {
			return cur, expected{err: driver.ErrNotFound}
		}
		if req.Landed(cur.record()) {
			return cur, expected{existing: cur}
		}
		if !req.Allows(cur.record()) {
			return cur, expected{err: driver.ErrStale, existing: cur}
		}
		n := *cur
		n.state, n.token, n.generation, n.expiresAt = driver.StateDone, req.NewToken, req.PostedGeneration, req.ExpiresAt.UnixNano()
		return &n, expected{existing: &n}
	case opGet:
		if cur == nil || cur.record().Expired(in.now) {
			return cur, expected{err: driver.ErrNotFound}
		}
		return cur, expected{existing: cur}
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
		if req.State == driver.StateWaiting {
			n.leaseUntil = req.NotBefore.UnixNano()
		}
		if req.Generation > 0 {
			n.generation = req.Generation
		}
		return &n, expected{}
	}
}

func matches(in linInput, want expected, out linOutput) bool {
	same := func(r driver.Record, m *modelRecord) bool {
		return r.State == m.state && r.Token == m.token && r.Attempt == m.attempt && r.Reopens == m.reopens && r.Fingerprint == m.fingerprint &&
			max(r.Generation, 1) == m.generation && r.Summary == m.summary
	}
	switch in.op {
	case driver.OpReopen, driver.OpCollect, opGet:
		switch {
		case want.err == nil:
			return out.err == nil && same(out.rec, want.existing)
		case !errors.Is(out.err, want.err):
			return false
		case errors.Is(want.err, driver.ErrNotFailed), errors.Is(want.err, driver.ErrStale):
			return same(out.rec, want.existing)
		}
		return true
	case driver.OpExtend, driver.OpComplete, driver.OpFail, driver.OpWait:
		return errors.Is(out.err, driver.ErrLeaseLost) == (want.err != nil) && (out.err == nil || want.err != nil)
	}
	if out.err != nil || out.claim.Acquired != want.acquired {
		return false
	}
	if want.acquired {
		return out.claim.Reclaimed == want.reclaimed && out.claim.Record.Token == in.claim.Token && out.claim.Record.Attempt == want.attempt &&
			out.claim.Record.Summary == want.summary
	}
	return same(out.claim.Record, want.existing)
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

// ScaleEnv names the environment variable that multiplies the histories
// of every Linearizable run (a whole number; default 1): the long campaign
// (scripts/linearizability-campaign.sh) sets it, CI does not.
const ScaleEnv = "IC_LINEARIZABLE_SCALE"

// Linearizable records o.Histories concurrent histories against newStore
// (times $IC_LINEARIZABLE_SCALE) and fails the test at the first one
// porcupine finds not linearizable, writing porcupine's visualisation of it
// to a file named in the failure.
func Linearizable(t *testing.T, newStore func(t *testing.T) driver.Store, o LinearizableOptions) {
	t.Helper()
	o = o.withDefaults()
	if v := os.Getenv(ScaleEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a whole number of at least 1", ScaleEnv, v)
		}
		o.Histories *= n
	}
	s := newStore(t)
	seen := map[string]int{}
	var recording, checking time.Duration
	ops, histories := 0, 0
	// Coverage is not left to chance: past o.Histories, histories are
	// recorded (and checked) until every kind of call has appeared, up to
	// a bound far beyond need; only a run that still lacks one fails.
	seed := uint64(time.Now().UnixNano())
	limit := max(CoverageFactor*o.Histories, MinCoverageHistories)
	for h := 0; h < o.Histories || (len(missingKinds(seen)) > 0 && h < limit); h++ {
		histories++
		start := time.Now()
		history := RecordHistory(t.Context(), s, uniqueKey(t)+fmt.Sprint(h), o, rand.New(rand.NewPCG(uint64(h), seed)))
		recording += time.Since(start)
		ops += len(history)
		for _, op := range history {
			seen[kind(op)]++
		}
		start = time.Now()
		res, info := porcupine.CheckOperationsVerbose(ClaimModel, history, o.Timeout)
		checking += time.Since(start)
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
			t.Fatalf("history %d (%d operations, seed %d) is not linearizable; see %s", h, len(history), seed, path)
		default:
			t.Fatalf("history %d: the checker gave up after %s (%d operations): make the histories smaller", h, o.Timeout, len(history))
		}
	}
	t.Logf("%d histories (%d asked for), %d operations, linearizable; recording %s, checking %s: %v", histories, o.Histories, ops,
		recording.Round(time.Millisecond), checking.Round(time.Millisecond), seen)
	// A run that never reclaimed, fenced or lost an answer checked nothing
	// that matters.
	for _, k := range missingKinds(seen) {
		t.Errorf("no %q call in %d histories (seed %d): the workload does not exercise the state machine (%v)", k, histories, seed, seen)
	}
}

// Linearizable records histories beyond the ones asked for while some
// kind of call (callKinds) has not appeared yet, up to CoverageFactor times
// as many and at least MinCoverageHistories in all: far beyond need (the
// rarest kind, a refused reopen, appears in about one history in seventy).
const (
	CoverageFactor       = 20
	MinCoverageHistories = 5000
)

// callKinds are the kinds of call (see kind) every Linearizable run must
// have made, or it checked nothing that matters.
func callKinds() []string {
	return []string{"acquired", "reclaimed", "resumed", "refused", "lease lost", "finished", "waited", "reopened", "reopen refused", "collected", "collect refused", "read", "unknown"}
}

// missingKinds returns the callKinds not in seen, in their order.
func missingKinds(seen map[string]int) []string {
	var out []string
	for _, k := range callKinds() {
		if seen[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// definite reports whether err is one of the state machine's answers (as
// opposed to a store that could not be reached).
func definite(err error) bool {
	return errors.Is(err, driver.ErrLeaseLost) || errors.Is(err, driver.ErrNotFound) || errors.Is(err, driver.ErrNotFailed) ||
		errors.Is(err, driver.ErrStale)
}

// kind names what a recorded call did, for the run's tally.
func kind(op porcupine.Operation) string {
	in, out := op.Input.(linInput), op.Output.(linOutput)
	switch {
	case out.unknown:
		return "unknown"
	case errors.Is(out.err, driver.ErrLeaseLost):
		return "lease lost"
	case in.op == opGet:
		return "read"
	case in.op == driver.OpReopen && out.err == nil:
		return "reopened"
	case in.op == driver.OpReopen:
		return "reopen refused"
	case in.op == driver.OpCollect && out.err == nil:
		return "collected"
	case in.op == driver.OpCollect:
		return "collect refused"
	case in.op != driver.OpClaim:
		switch in.op {
		case driver.OpExtend:
			return "extended"
		case driver.OpWait:
			return "waited"
		}
		return "finished"
	case out.claim.Reclaimed:
		return "reclaimed"
	case out.claim.Acquired && out.claim.Record.Attempt > 1:
		return "resumed"
	case out.claim.Acquired:
		return "acquired"
	}
	return "refused"
}

// RecordHistory runs o.Clients clients at once on o.Keys keys of prefix and
// returns every call with its answer. Each client has its own clock, offset
// within a few milliseconds of the others (the leases are a few
// milliseconds too, so that expiries, reclaims and fenced finishes happen),
// reclaims only past a skew margin of its own (0 or 1 ms), abandons a
// lease now and then (never finishes it), now and then claims
// with another payload's fingerprint, reads, reopens a FAILED record it saw
// (as an operator does: fenced on the token it read, or not), collects a
// FAILED, WAITING or IN_PROGRESS record it saw (fenced on its state, token
// and generation, as reconciliation does), and loses a
// fraction of the store's answers after the call took effect.
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
			// The skew margin: a lease is reclaimable only this long after
			// it ends by this client's clock (0 or 1 ms, as Guards
			// configured apart would).
			margin := time.Duration(r.IntN(2)) * time.Millisecond
			now := func(step int) time.Time { return base.Add(offset + time.Duration(step)*time.Millisecond) }
			held := map[string]string{}        // key → token this client believes it holds
			failed := map[string]string{}      // key → token of a FAILED record it saw
			seen := map[string]driver.Record{} // key → a collectable record it saw
			saw := func(key string, rec driver.Record) {
				switch rec.State {
				case driver.StateFailed, driver.StateWaiting, driver.StateInProgress:
					seen[key] = rec
				}
			}
			for i := range o.Ops {
				key := fmt.Sprintf("%s-%d", prefix, r.IntN(o.Keys))
				t := now(i * 2)
				var in linInput
				tok, ok := held[key]
				prev, sawFailed := failed[key]
				read, sawRecord := seen[key]
				switch {
				case !ok && sawRecord && r.IntN(3) == 0:
					delete(seen, key)
					gen := read.Generation
					if r.IntN(6) == 0 {
						gen++ // not the generation read: refused
					}
					in = linInput{op: driver.OpCollect, key: key, coll: driver.CollectRequest{Key: key, From: read.State, Token: read.Token,
						Generation: gen, LeaseExpiredBy: t.Add(-margin), NewToken: fmt.Sprintf("k%d-%d-%x", c, i, r.Uint32()),
						PostedGeneration: 1 + r.IntN(2), Status: "DEBITED", Now: t, ExpiresAt: t.Add(time.Hour)}}
				case !ok && sawFailed && r.IntN(2) == 0:
					if r.IntN(3) == 0 {
						prev = "" // an unfenced reopen
					}
					delete(failed, key)
					in = linInput{op: driver.OpReopen, key: key, reopen: driver.ReopenRequest{Key: key, Token: fmt.Sprintf("r%d-%d-%x", c, i, r.Uint32()),
						Reason: "linearizability", PrevToken: prev, Now: t, LeaseUntil: t.Add(-5 * time.Millisecond), ExpiresAt: t.Add(time.Hour)}}
				case !ok && r.IntN(8) == 0:
					in = linInput{op: opGet, key: key, now: t}
				case ok && r.IntN(4) == 0:
					in = linInput{op: driver.OpExtend, key: key, extend: driver.ExtendRequest{Key: key, Token: tok, Now: t, LeaseUntil: t.Add(5 * time.Millisecond)}}
				case ok && r.IntN(5) != 0:
					st, op := driver.StateDone, driver.OpComplete
					switch r.IntN(8) {
					case 0, 1:
						st, op = driver.StateFailed, driver.OpFail
					case 2, 3:
						st, op = driver.StateWaiting, driver.OpWait
					}
					f := driver.FinishRequest{Key: key, Token: tok, State: st, Status: string(st), Now: t, ExpiresAt: t.Add(time.Hour)}
					if st == driver.StateWaiting {
						// Runs again a few milliseconds on, maybe under the next generation.
						f.NotBefore = t.Add(time.Duration(1+r.IntN(4)) * time.Millisecond)
						if r.IntN(2) == 0 {
							f.Generation = 2 + r.IntN(3)
						}
					}
					in = linInput{op: op, key: key, finish: f}
					delete(held, key)
				default:
					if ok {
						delete(held, key) // abandon it: a worker that vanished
					}
					fp := "fp-A"
					if r.IntN(10) == 0 {
						fp = "fp-B" // the same charge id with another payload
					}
					tok := fmt.Sprintf("c%d-%d-%x", c, i, r.Uint32())
					// A claim without a summary (it keeps the record's), or
					// with one of two.
					summary := []string{"", "sum-1", "sum-2"}[r.IntN(3)]
					in = linInput{op: driver.OpClaim, key: key, claim: driver.ClaimRequest{Key: key, Token: tok, Fingerprint: fp, Summary: summary,
						Now: t, LeaseExpiredBy: t.Add(-margin), LeaseUntil: t.Add(3 * time.Millisecond), ExpiresAt: t.Add(time.Hour)}}
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
					if err == nil && out.claim.Record.State == driver.StateFailed {
						failed[key] = out.claim.Record.Token
					}
					if err == nil && !out.claim.Acquired {
						saw(key, out.claim.Record)
					}
				case driver.OpReopen:
					out.rec, err = s.Reopen(ctx, in.reopen)
				case driver.OpCollect:
					co, can := s.(driver.Collector)
					if !can {
						err = errors.New("the store does not collect (driver.Collector)")
						break
					}
					out.rec, err = co.Collect(ctx, in.coll)
				case opGet:
					out.rec, err = s.Get(ctx, key, t)
					if err == nil && out.rec.State == driver.StateFailed {
						failed[key] = out.rec.Token
					}
					if err == nil {
						saw(key, out.rec)
					}
				case driver.OpExtend:
					err = s.Extend(ctx, in.extend)
				default:
					err = s.Finish(ctx, in.finish)
				}
				ret := seq.Add(1)
				lose := r.Float64() < o.LoseAnswers
				switch {
				case err == nil && lose, err != nil && !definite(err):
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
