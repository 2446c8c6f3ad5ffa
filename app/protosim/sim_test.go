package protosim

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/dbtest"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/postgres"
	"github.com/finedge/idempotent-consumer/postgres/pgtest"
	"github.com/finedge/idempotent-consumer/sqlite"
)

var (
	seeds   = flag.Int("sim.seeds", 300, "how many seeds TestSimulate runs per backend")
	seed    = flag.Uint64("sim.seed", 0, "run this seed alone, with its trace")
	first   = flag.Uint64("sim.first", 1, "the first seed of TestSimulate")
	verbose = flag.Bool("sim.trace", false, "print the trace of every run")
)

// covered are the kinds of event (Result.Kinds) that TestSimulate's seeds
// must all have made happen: every actor's moves, every fault.
var covered = []string{
	"claim acquired", "claim reclaimed", "claim resumed", "finish DONE", "finish FAILED", "finish WAITING",
	"decline", "hard decline", "debit of a later generation", "a declined debit booked late",
	"reopen", "reopen with a new attempt", "new attempt on a hard decline refused",
	"reopen by an approval", "approval run resumed", "approval target reopened",
	"collect", "resolve adopted", "resolve marked",
	"wait on the Lambda", "wait started over (a copy sent)",
	"store outage", "consumers paused", "death: consumer", "death: operator", "call that fails", "call that answer lost",
}

func memory() (driver.Store, func(), error) { return memstore.New(), func() {}, nil }

// simDir is where the runs' approval files go: in memory (/dev/shm)
// where the machine has it, so that their fsyncs cost nothing, else the
// test's temporary directory.
func simDir(tb testing.TB) string {
	if dir, err := os.MkdirTemp("/dev/shm", "protosim-"); err == nil {
		tb.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return tb.TempDir()
}

// sqliteStores opens a fresh SQLite database per run (in simDir: the
// store is SQLite's own code either way).
func sqliteStores(t *testing.T) func() (driver.Store, func(), error) {
	dir := simDir(t)
	n := 0
	return func() (driver.Store, func(), error) {
		n++
		path := filepath.Join(dir, fmt.Sprintf("run%d.db", n))
		db, err := sqlite.Open(t.Context(), path, sqlite.OpenOptions{Sync: sqlite.SyncNormal})
		if err != nil {
			return nil, nil, err
		}
		return sqlite.NewStore(db), func() { db.Close(); os.Remove(path) }, nil
	}
}

// postgresStores opens a fresh schema of the test database per run
// (pgtest: in CI a server that cannot be reached fails the test).
func postgresStores(t *testing.T) func() (driver.Store, func(), error) {
	admin := pgtest.Open(t) // fails in CI when the server cannot be reached
	return func() (driver.Store, func(), error) {
		schema := dbtest.Name("ic_sim_")
		db, err := postgres.Open(t.Context(), dbtest.PostgresURL(), postgres.Options{Schema: schema, MaxConns: 2})
		if err != nil {
			return nil, nil, err
		}
		// Closed and dropped with its run: a pool a run kept would leave
		// the server without connections after a few hundred runs.
		return postgres.NewStore(db), func() {
			db.Close()
			_, _ = admin.Pool().Exec(context.Background(), "drop schema if exists "+schema+" cascade")
		}, nil
	}
}

// BenchmarkSimulate runs seeds on the in-memory store without traces,
// approvals (and their files) in the mix as TestSimulate runs them: the
// budget the simulator has (issue 50 asks 10,000 runs a minute).
func BenchmarkSimulate(b *testing.B) {
	var sd uint64
	dir := simDir(b)
	for b.Loop() {
		sd++
		if r := Run(b.Context(), Config{Seed: sd, NewStore: memory, NoTrace: true, Dir: dir}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Minutes(), "runs/min")
}

func TestSimulate(t *testing.T) {
	backends := []struct {
		name string
		// share of -sim.seeds run on it: a store on disk costs more a run
		share    int
		newStore func(t *testing.T) func() (driver.Store, func(), error)
	}{
		{"memory", 1, func(*testing.T) func() (driver.Store, func(), error) { return memory }},
		{"sqlite", 5, sqliteStores},
		{"postgres", 50, postgresStores},
	}
	for _, b := range backends {
		name := b.name
		t.Run(name, func(t *testing.T) {
			newStore, dir := b.newStore(t), simDir(t)
			from, n := *first, uint64(max(*seeds/b.share, 1))
			if *seed != 0 {
				from, n = *seed, 1
			}
			start := time.Now()
			var failed int
			firstOf, count, foundAfter := map[string]uint64{}, map[string]int{}, map[string]time.Duration{}
			kinds := map[string]int{}
			for sd := from; sd < from+n; sd++ {
				r := Run(t.Context(), Config{Seed: sd, NewStore: newStore, Dir: dir})
				for k, v := range r.Kinds {
					kinds[k] += v
				}
				if !r.Failed() {
					if *verbose || *seed != 0 {
						t.Logf("%s", r.Report())
					}
					continue
				}
				failed++
				if failed <= 2 || *seed != 0 {
					t.Errorf("%s", r.Report())
				}
				for _, c := range r.Classes() {
					if count[c]++; count[c] == 1 {
						firstOf[c], foundAfter[c] = sd, time.Since(start)
					}
				}
			}
			for _, c := range slices.Sorted(maps.Keys(count)) {
				t.Errorf("%s: %d seed(s), first %d, found after %s", c, count[c], firstOf[c], foundAfter[c].Round(time.Millisecond))
			}
			t.Logf("%s covered: %v", name, kinds)
			// A check left to chance is no check: every move and every
			// fault must have happened in the seeds run (the README's 300
			// on the in-memory store and more).
			if name == "memory" && n >= 300 {
				for _, k := range covered {
					if kinds[k] == 0 {
						t.Errorf("no seed of %d..%d covered %q: the invariants were not put to it", from, from+n-1, k)
					}
				}
			}
			t.Logf("%s: %d seeds in %s, %d failed", name, n, time.Since(start).Round(time.Millisecond), failed)
		})
	}
}

// TestPlantedDefects: each invariant fails on a defect planted for it,
// within the first seeds (the same seeds every time).
func TestPlantedDefects(t *testing.T) {
	for _, tt := range []struct {
		plant, class string
	}{
		{PlantBankIgnoresKeys, "(a)"},
		{PlantAnyNewAttempt, "(b)"},
		{PlantAckOnRetry, "(c)"},
		{PlantMarkNotCollect, "(f)"},
		{PlantLeaveClaim, "(g)"},
		{PlantLambdaKeepsAge, "(c)"},
		{PlantUnfencedApproval, "(e)"},
		{PlantRunWithoutBook, "(d)"},
		{PlantDropSummary, "(h)"},
	} {
		t.Run(tt.plant, func(t *testing.T) {
			dir := simDir(t)
			const budget = 3000
			for sd := uint64(1); sd <= budget; sd++ {
				r := Run(t.Context(), Config{Seed: sd, NewStore: memory, Plant: tt.plant, Dir: dir})
				if slices.Contains(r.Classes(), tt.class) {
					t.Logf("%s caught by %s at seed %d: %s", tt.plant, tt.class, sd, r.Violations[0])
					return
				}
			}
			t.Fatalf("planted %s: invariant %s did not fail within %d seeds", tt.plant, tt.class, budget)
		})
	}
}

// TestReplayIsExact: a seed runs the same way every time, to the letter
// of its trace, on both stores: a failure's seed is its reproduction.
func TestReplayIsExact(t *testing.T) {
	for _, b := range []struct {
		name     string
		newStore func() (driver.Store, func(), error)
	}{{"memory", memory}, {"sqlite", sqliteStores(t)}} {
		for sd := uint64(1); sd <= 40; sd++ {
			one := Run(t.Context(), Config{Seed: sd, NewStore: b.newStore})
			two := Run(t.Context(), Config{Seed: sd, NewStore: b.newStore})
			if !slices.Equal(one.Trace, two.Trace) || one.Steps != two.Steps {
				for i := range min(len(one.Trace), len(two.Trace)) {
					if one.Trace[i] != two.Trace[i] {
						t.Fatalf("%s seed %d runs differently at trace line %d:\n%s\n%s", b.name, sd, i, one.Trace[i], two.Trace[i])
					}
				}
				t.Fatalf("%s seed %d: %d vs %d steps, %d vs %d trace lines", b.name, sd, one.Steps, two.Steps, len(one.Trace), len(two.Trace))
			}
		}
	}
}
