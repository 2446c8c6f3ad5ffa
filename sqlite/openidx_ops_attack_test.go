package sqlite

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// lightSnapshot: the operators' listings, paged two at a time.
func lightSnapshot(t *testing.T, s *Store, now time.Time) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	keys := func(rs []driver.Record) []string {
		var k []string
		for _, r := range rs {
			k = append(k, fmt.Sprintf("%s|%s|%s|%s|%d", r.Key, r.State, r.Status, r.Token, r.Attempt))
		}
		return k
	}
	st, n, err := s.Stuck(ctx, now, 1000)
	if err != nil {
		t.Fatal(err)
	}
	sk := keys(st)
	slices.Sort(sk)
	fmt.Fprintf(&b, "stuck %d %v\n", n, sk)
	c, err := s.CountByState(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "count %v\n", c)
	for _, state := range driver.States {
		for _, status := range []string{"", "DEBITED", "DEBITED_NOTIFICATION_FAILED", "DECLINED", "NOT_DUE"} {
			r, err := s.ListByResult(ctx, state, status, now, 1000)
			if err != nil {
				t.Fatal(err)
			}
			rk := keys(r)
			slices.Sort(rk)
			fmt.Fprintf(&b, "byresult %s %q %v\n", state, status, rk)
			all := pagedKeys(t, s, driver.ListRequest{State: state, Status: status, Limit: 2, Now: now}, 100, keys)
			fmt.Fprintf(&b, "list %s %q %v\n", state, status, all)
		}
	}
	return b.String()
}

// The same random run of every write of the state machine (claim,
// reclaim, finish DONE with DEBITED and other statuses, FAILED, WAITING,
// extend, reopen, amend both ways, collect, expiry, purge) against a
// store at schema 7 and one at schema 8: the same answers and, after
// every step, the same listings.
func TestAttackRandomOpsEqualVersion7(t *testing.T) {
	dir := t.TempDir()
	stores := []*Store{NewStore(openAt(t, filepath.Join(dir, "v7.db"), 7))}
	d8, err := Open(t.Context(), filepath.Join(dir, "v8.db"), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d8.Close() })
	stores = append(stores, NewStore(d8))
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(55, 8))
	now := attackAt
	toks := map[string]string{}
	statuses := []string{"DEBITED", "DEBITED", "DEBITED_NOTIFICATION_FAILED", "DECLINED", "debited"}
	done := map[int]int{}
	for step := range 600 {
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		key := fmt.Sprintf("k%02d", rng.IntN(14))
		op := rng.IntN(10)
		fst := []driver.State{driver.StateDone, driver.StateDone, driver.StateFailed, driver.StateWaiting}[rng.IntN(4)]
		var answers []string
		for _, s := range stores {
			var ans string
			switch op {
			case 0, 1: // claim
				tok := fmt.Sprintf("t%d", step)
				r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
					LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(20 * time.Minute)})
				if err == nil && r.Acquired {
					toks[key] = tok
				}
				ans = fmt.Sprint(r.Acquired, r.Reclaimed, r.Record.State, r.Record.Status, err)
			case 2, 3, 4: // finish
				st := fst
				f := driver.FinishRequest{Key: key, Token: toks[key], State: st, Status: statuses[step%len(statuses)], Now: now, ExpiresAt: now.Add(20 * time.Minute)}
				if st == driver.StateWaiting {
					f.NotBefore = now.Add(30 * time.Second)
					f.Status = "NOT_DUE"
				}
				if st == driver.StateFailed {
					f.Status = "DECLINED"
				}
				ans = fmt.Sprint(s.Finish(ctx, f))
			case 5: // reopen
				r, err := s.Reopen(ctx, driver.ReopenRequest{Key: key, Token: fmt.Sprintf("r%d", step), Reason: "r", Now: now, LeaseUntil: now.Add(-time.Hour), ExpiresAt: now.Add(20 * time.Minute), Generation: 2})
				if err == nil {
					toks[key] = fmt.Sprintf("r%d", step)
				}
				ans = fmt.Sprint(r.State, err)
			case 6, 7: // amend, both ways
				r, err := s.Get(ctx, key, now)
				if err == nil && r.State == driver.StateDone {
					to := "DEBITED"
					if r.Status == "DEBITED" {
						to = "DEBITED_NOTIFICATION_FAILED"
					}
					a, err := s.Amend(ctx, driver.AmendRequest{Key: key, Token: r.Token, FromStatus: r.Status, Status: to, Now: now})
					ans = fmt.Sprint(a.Status, err)
				} else {
					ans = fmt.Sprint(err)
				}
			case 8: // collect a FAILED or stuck claim
				r, err := s.Get(ctx, key, now)
				if err == nil && (r.State == driver.StateFailed || r.State == driver.StateInProgress) {
					c, err := s.Collect(ctx, driver.CollectRequest{Key: key, From: r.State, Token: r.Token, Generation: r.Generation, LeaseExpiredBy: now,
						NewToken: fmt.Sprintf("c%d", step), PostedGeneration: max(r.Generation, 1), Status: statuses[step%len(statuses)], Now: now, ExpiresAt: now.Add(20 * time.Minute)})
					ans = fmt.Sprint(c.State, c.Status, err)
				} else {
					ans = fmt.Sprint(err)
				}
			case 9:
				n, err := s.Purge(ctx, now, 3)
				ans = fmt.Sprint(n, err)
			}
			answers = append(answers, ans)
		}
		a := answers[0]
		took := map[int]bool{0: strings.HasPrefix(a, "true"), 1: strings.HasPrefix(a, "true"), 2: a == "<nil>", 3: a == "<nil>", 4: a == "<nil>",
			5: a == "IN_PROGRESS<nil>", 6: strings.HasPrefix(a, "DEBITED") && strings.HasSuffix(a, "<nil>"), 7: strings.HasPrefix(a, "DEBITED") && strings.HasSuffix(a, "<nil>"),
			8: strings.HasPrefix(a, "DONE") && strings.HasSuffix(a, "<nil>"), 9: !strings.HasPrefix(a, "0 ")}[op]
		if took {
			done[op]++
		}
		if answers[0] != answers[1] {
			t.Fatalf("step %d op %d %s: v7 %q, v8 %q", step, op, key, answers[0], answers[1])
		}
		if a, b := lightSnapshot(t, stores[0], now), lightSnapshot(t, stores[1], now); a != b {
			t.Fatalf("step %d: listings differ\nv7:\n%s\nv8:\n%s", step, a, b)
		}
	}
	t.Logf("writes that took, by op: %v", done)
	for _, op := range []int{0, 2, 5, 6, 8, 9} {
		if done[op] == 0 {
			t.Errorf("op %d never took: the run does not cover it", op)
		}
	}
	var ok string
	if err := d8.sql.QueryRowContext(ctx, "pragma integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q %v", ok, err)
	}
}
