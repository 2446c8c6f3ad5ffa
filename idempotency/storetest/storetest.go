package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Lease and Retention used by the suite's guards.
const (
	Lease     = 30 * time.Second
	Retention = 72 * time.Hour
)

// NewStore gives the store one subtest runs on.
type NewStore = func(t *testing.T) driver.Store

// Run runs the whole conformance suite: every topic below, then every row
// of the state machine (Transitions). Linearizable, the check of
// concurrent histories against the same machine, is run by each store's
// tests beside it. newStore is called once per subtest;
// it may return the same store every time (every subtest uses keys of its
// own). A backend may also run one topic alone.
func Run(t *testing.T, newStore func(t *testing.T) driver.Store) {
	t.Helper()
	t.Run("Claims", func(t *testing.T) { Claims(t, newStore) })
	t.Run("Leases", func(t *testing.T) { Leases(t, newStore) })
	t.Run("Races", func(t *testing.T) { Races(t, newStore) })
	t.Run("LostAnswers", func(t *testing.T) { LostAnswers(t, newStore) })
	t.Run("Operators", func(t *testing.T) { Operators(t, newStore) })
	t.Run("Listing", func(t *testing.T) { Listing(t, newStore) })
	t.Run("Results", func(t *testing.T) { Results(t, newStore) })
	t.Run("Transitions", func(t *testing.T) { Transitions(t, newStore) })
	t.Run("Waiting", func(t *testing.T) { Waiting(t, newStore) })
	t.Run("Summaries", func(t *testing.T) { Summaries(t, newStore) })
}

// Conformance runs Run on s, then Linearizable with the default options:
// the whole suite a store's tests run on one store (s keeps keys of every
// subtest apart).
func Conformance(t *testing.T, s driver.Store) {
	t.Helper()
	same := func(*testing.T) driver.Store { return s }
	Run(t, same)
	// Concurrent histories with lost answers, checked by porcupine against the state machine.
	t.Run("Linearizable", func(t *testing.T) { Linearizable(t, same, LinearizableOptions{}) })
}

// Claims runs the cases on the claim of a key: first, duplicate in each state, another payload, retention, unusual keys.
func Claims(t *testing.T, newStore NewStore) { runCases(t, newStore, claimsCases) }

// Leases runs the cases on leases and fencing: reclaim after expiry, a stale worker fenced, extend, yield, final states, clocks within the skew margin.
func Leases(t *testing.T, newStore NewStore) { runCases(t, newStore, leasesCases) }

// Races runs the cases on many workers at once on one key: one winner, for a claim and for a reclaim.
func Races(t *testing.T, newStore NewStore) { runCases(t, newStore, racesCases) }

// LostAnswers runs the cases on a write that landed but whose answer was lost, retried: the retry is recognised as ours.
func LostAnswers(t *testing.T, newStore NewStore) { runCases(t, newStore, lostAnswersCases) }

// Operators runs the cases on what operators do: reopen (also into a new generation, conditional on the record read), amend and list by result, stuck claims, counts by state, purge.
func Operators(t *testing.T, newStore NewStore) { runCases(t, newStore, operatorsCases) }

// Listing runs the cases of driver.StateLister (optional): pages by key
// across records that change state between pages, a literal prefix
// search, a state with none, retention.
func Listing(t *testing.T, newStore NewStore) { runCases(t, newStore, listingCases) }

// Results runs the cases on typed results (idempotency.DoTyped): a DONE
// record's Detail of driver.MaxResultBytes is kept whole, the first result
// is replayed to duplicates, a result past the limit is refused and the
// work does not run again, a binary codec's result survives the store.
func Results(t *testing.T, newStore NewStore) { runCases(t, newStore, resultsCases) }

// Waiting runs the cases of a WAITING record beyond its transitions: what
// a wait writes (the not-before as LeaseUntil, the result, a generation
// and a history replaced only when given, for every state a finish
// writes), and what the operators' capabilities make of it (each optional,
// skipped where the store lacks it): counted by state, listed by state
// and by result, walked, never listed as stuck, however long past its
// not-before. It is not part of Run yet (every store's state machine has
// WAITING first); a store's tests call it beside Run.
func Waiting(t *testing.T, newStore NewStore) { runCases(t, newStore, waitingCases) }

// Summaries runs the cases of a record's Summary (what the caller keeps
// to check the effect against an outside ledger): written by the claim
// that takes the key, kept by a claim that carries none, replaced by a
// reclaim that carries one, dropped with a record past its retention, and
// kept by every other write — a finish to each state, a reopen, an amend
// and a collect (each optional capability skipped where the store lacks
// it) — and by every listing that returns records.
func Summaries(t *testing.T, newStore NewStore) {
	runCases(t, newStore, append(summaryCases[:len(summaryCases):len(summaryCases)], summaryAttackCases...))
}

// capable is e's store as the optional capability T, or the case is
// skipped saying why.
func capable[T any](t *testing.T, e *env, why string) T {
	t.Helper()
	c, ok := e.s.(T)
	if !ok {
		t.Skip(why)
	}
	return c
}

// testCase is one named case of a topic.
type testCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// runCases runs each case on a fresh guard over newStore(t), with a key of
// its own and a clock at Epoch.
func runCases(t *testing.T, newStore NewStore, cases []testCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			clock := NewClock(Epoch)
			g, err := idempotency.NewGuard(s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: clock, SkewMargin: -1})
			if err != nil {
				t.Fatalf("NewGuard: %v", err)
			}
			tc.run(t, &env{g: g, s: s, clock: clock, key: uniqueKey(t)})
		})
	}
}

type env struct {
	g     *idempotency.Guard
	s     driver.Store
	clock *Clock
	key   string
}

func (e *env) claim(t *testing.T, fp string, want idempotency.Outcome) idempotency.Claim {
	t.Helper()
	c, err := e.g.Claim(t.Context(), e.key, fp)
	if err != nil {
		t.Fatalf("Claim(%q): %v", e.key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim outcome = %v, want %v (record %+v)", c.Outcome, want, c.Record)
	}
	return c
}

func (e *env) get(t *testing.T) driver.Record {
	t.Helper()
	r, err := e.g.Get(t.Context(), e.key)
	if err != nil {
		t.Fatalf("Get(%q): %v", e.key, err)
	}
	return r
}

// fixedTokenGuard is a guard on the same store and clock whose every claim
// uses token: what an SDK retry of one claim request looks like.
func (e *env) fixedTokenGuard(t *testing.T, token string) *idempotency.Guard {
	t.Helper()
	g, err := idempotency.NewGuard(e.s, idempotency.Options{Lease: Lease, Retention: Retention, Clock: e.clock, SkewMargin: -1,
		NewToken: func() (string, error) { return token, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func uniqueKey(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "storetest-" + hex.EncodeToString(b[:]) + "-" + t.Name()
}

func sameTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

const (
	fpA = "fingerprint-A"
	fpB = "fingerprint-B"
)
