package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// lister is e's store as a StateLister, or the case is skipped.
func (e *env) lister(t *testing.T) driver.StateLister {
	t.Helper()
	l := capable[driver.StateLister](t, e, "the store does not list records by state (optional)")
	return l
}

// failed makes key a FAILED record; done a DONE one with status.
func (e *env) failed(t *testing.T, key string) {
	t.Helper()
	c, err := e.g.Claim(t.Context(), key, fpA)
	if err != nil || c.Outcome != idempotency.Acquired {
		t.Fatalf("claim %s: %v %v", key, c.Outcome, err)
	}
	if err := e.g.Fail(t.Context(), c.Lease(), "FAILED", "declined"); err != nil {
		t.Fatal(err)
	}
}

func (e *env) done(t *testing.T, key, status string) {
	t.Helper()
	c, err := e.g.Claim(t.Context(), key, fpA)
	if err != nil || c.Outcome != idempotency.Acquired {
		t.Fatalf("claim %s: %v %v", key, c.Outcome, err)
	}
	if err := e.g.Complete(t.Context(), c.Lease(), status, "ref"); err != nil {
		t.Fatal(err)
	}
}

func listPage(t *testing.T, l driver.StateLister, req driver.ListRequest) driver.ListPage {
	t.Helper()
	p, err := l.ListState(t.Context(), req)
	if err != nil {
		t.Fatalf("ListState(%+v): %v", req, err)
	}
	for i, r := range p.Records {
		if r.State != req.State || (req.Status != "" && r.Status != req.Status) {
			t.Fatalf("ListState(%s %s) listed %s %s %s", req.State, req.Status, r.Key, r.State, r.Status)
		}
		if i > 0 && p.Records[i-1].Key >= r.Key {
			t.Fatalf("ListState: keys not ascending: %q then %q", p.Records[i-1].Key, r.Key)
		}
		if r.Key <= req.After {
			t.Fatalf("ListState after %q listed %q", req.After, r.Key)
		}
	}
	return p
}

func keysOf(p driver.ListPage) []string {
	var ks []string
	for _, r := range p.Records {
		ks = append(ks, r.Key)
	}
	return ks
}

var listingCases = []testCase{
	{"PagesByKeyWhileRecordsChangeState", func(t *testing.T, e *env) {
		l := e.lister(t)
		p := e.key + "/"
		k := func(s string) string { return p + s }
		for _, s := range []string{"00", "01", "02", "03", "04", "05", "06"} {
			e.failed(t, k(s))
		}
		e.done(t, k("d1"), "DEBITED")
		e.done(t, k("d2"), "DEBITED_NOTIFICATION_FAILED")
		if c, err := e.g.Claim(t.Context(), k("ip"), fpA); err != nil || c.Outcome != idempotency.Acquired {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		e.failed(t, e.key+"0-outside") // shares e.key, not the prefix
		req := driver.ListRequest{State: driver.StateFailed, Prefix: p, Limit: 3, Now: e.clock.Now()}
		p1 := listPage(t, l, req)
		if got := keysOf(p1); !slices.Equal(got, []string{k("00"), k("01"), k("02")}) || p1.Next != k("02") {
			t.Fatalf("page 1 = %q next %q", got, p1.Next)
		}
		// Between the pages: 01 (listed) and 03 (not yet) leave FAILED, 07
		// joins ahead of the cursor, 000 joins behind it.
		e.clock.Advance(time.Minute)
		for _, s := range []string{"01", "03"} {
			if _, err := e.g.Reopen(t.Context(), k(s), "fixed", idempotency.ReopenOptions{}); err != nil {
				t.Fatalf("reopen %s: %v", s, err)
			}
		}
		e.failed(t, k("07"))
		e.failed(t, k("000"))
		req.After, req.Now = p1.Next, e.clock.Now()
		p2 := listPage(t, l, req)
		if got := keysOf(p2); !slices.Equal(got, []string{k("04"), k("05"), k("06")}) || p2.Next != k("06") {
			t.Fatalf("page 2 = %q next %q", got, p2.Next)
		}
		req.After = p2.Next
		p3 := listPage(t, l, req)
		if got := keysOf(p3); !slices.Equal(got, []string{k("07")}) || p3.Next != "" {
			t.Fatalf("page 3 = %q next %q (want the last page, no cursor)", got, p3.Next)
		}
		// The other states, and a status.
		ip := listPage(t, l, driver.ListRequest{State: driver.StateInProgress, Prefix: p, Limit: 10, Now: e.clock.Now()})
		if got := keysOf(ip); !slices.Equal(got, []string{k("01"), k("03"), k("ip")}) || ip.Next != "" {
			t.Fatalf("IN_PROGRESS = %q next %q", got, ip.Next)
		}
		dnf := listPage(t, l, driver.ListRequest{State: driver.StateDone, Status: "DEBITED_NOTIFICATION_FAILED", Prefix: p, Limit: 10, Now: e.clock.Now()})
		if got := keysOf(dnf); !slices.Equal(got, []string{k("d2")}) {
			t.Fatalf("DONE DEBITED_NOTIFICATION_FAILED = %q", got)
		}
		done, err := l.ListState(t.Context(), driver.ListRequest{State: driver.StateDone, Prefix: p, Limit: 10, Now: e.clock.Now()})
		switch {
		case errors.Is(err, driver.ErrNotIndexed): // a store whose index holds only the states worth listing
		case err != nil:
			t.Fatal(err)
		case !slices.Equal(keysOf(done), []string{k("d1"), k("d2")}):
			t.Fatalf("DONE = %q", keysOf(done))
		}
		// A record leaving a listed result leaves the listing: the notice
		// sent after all.
		if am, ok := e.s.(driver.Amender); ok {
			rec, err := e.s.Get(t.Context(), k("d2"), e.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := am.Amend(t.Context(), driver.AmendRequest{Key: rec.Key, Token: rec.Token, FromStatus: rec.Status, Status: "DEBITED", Now: e.clock.Now()}); err != nil {
				t.Fatal(err)
			}
			if got := keysOf(listPage(t, l, driver.ListRequest{State: driver.StateDone, Status: "DEBITED_NOTIFICATION_FAILED", Prefix: p, Limit: 10, Now: e.clock.Now()})); len(got) != 0 {
				t.Fatalf("an amended record is still listed: %q", got)
			}
		}
		// Past retention nothing is listed.
		req = driver.ListRequest{State: driver.StateFailed, Prefix: p, Limit: 50, Now: e.clock.Now().Add(Retention + time.Hour)}
		if got := keysOf(listPage(t, l, req)); len(got) != 0 {
			t.Fatalf("records past retention listed: %q", got)
		}
	}},
	{"PrefixIsLiteral", func(t *testing.T, e *env) {
		l := e.lister(t)
		p := e.key + "/"
		for _, s := range []string{"a%b", "a_b", "axb", "a*b", "a?b", "a[b]", `a\b`, "a.b", "A%B"} {
			e.failed(t, p+s)
		}
		for prefix, want := range map[string][]string{
			"a%": {"a%b"}, "a_": {"a_b"}, "a*": {"a*b"}, "a?": {"a?b"}, "a[": {"a[b]"}, `a\`: {`a\b`}, "a.": {"a.b"},
			"a": {"a%b", "a*b", "a.b", "a?b", "a[b]", `a\b`, "a_b", "axb"}, "x": nil, "a%b%": nil, "%": nil, ".*": nil,
		} {
			var w []string
			for _, s := range want {
				w = append(w, p+s)
			}
			got := keysOf(listPage(t, l, driver.ListRequest{State: driver.StateFailed, Prefix: p + prefix, Limit: 50, Now: e.clock.Now()}))
			if !slices.Equal(got, w) {
				t.Errorf("prefix %q: got %q, want %q", prefix, got, w)
			}
		}
	}},
	{"StateWithNone", func(t *testing.T, e *env) {
		l := e.lister(t)
		e.done(t, e.key+"/done", "DEBITED")
		for _, st := range []driver.State{driver.StateFailed, driver.StateInProgress} {
			pg := listPage(t, l, driver.ListRequest{State: st, Prefix: e.key, Limit: 5, Now: e.clock.Now()})
			if len(pg.Records) != 0 || pg.Next != "" {
				t.Fatalf("%s: %q next %q, want none", st, keysOf(pg), pg.Next)
			}
		}
		// A limit beyond the cap is the cap, not an error.
		if _, err := l.ListState(t.Context(), driver.ListRequest{State: driver.StateFailed, Prefix: e.key, Limit: 1 << 30, Now: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}},
	{"WalksTheRecordsUpdatedInAPeriod", func(t *testing.T, e *env) {
		// What reconciliation reads: the DONE records finished in a
		// statement's period, each once, whatever their key; not another
		// state's, not a tool's own record, not one past retention.
		k := func(s string) string { return e.key + "/" + s }
		t0 := e.clock.Now()
		e.done(t, k("before"), "DEBITED")
		e.clock.Advance(time.Hour)
		from := e.clock.Now()
		e.done(t, k("a"), "DEBITED")
		e.done(t, k("b"), "DEBITED_NOTIFICATION_FAILED")
		e.failed(t, k("failed"))
		e.done(t, driver.InternalKeyPrefix+"tool/"+e.key, "SENT")
		if c, err := e.g.Claim(t.Context(), k("ip"), fpA); err != nil || c.Outcome != idempotency.Acquired {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		e.clock.Advance(time.Hour)
		to := e.clock.Now()
		e.done(t, k("at-the-end"), "DEBITED") // [from, to): not in
		walk := func(req driver.WalkRequest) []string {
			t.Helper()
			var got []string
			err := driver.Walk(t.Context(), e.s, req, func(r driver.Record) error {
				if strings.HasPrefix(r.Key, e.key+"/") {
					got = append(got, r.Key)
				}
				if strings.HasPrefix(r.Key, driver.InternalKeyPrefix) {
					t.Errorf("walked a tool's own record %s", r.Key)
				}
				if r.State != req.State {
					t.Errorf("walked %s in state %s", r.Key, r.State)
				}
				return nil
			})
			if errors.Is(err, driver.ErrNotIndexed) {
				t.Skip("the store cannot walk records by update time (optional)")
			}
			if err != nil {
				t.Fatalf("Walk: %v", err)
			}
			slices.Sort(got)
			return got
		}
		req := driver.WalkRequest{State: driver.StateDone, From: from, To: to, Now: e.clock.Now()}
		if got := walk(req); !slices.Equal(got, []string{k("a"), k("b")}) {
			t.Fatalf("walk DONE [%s, %s) = %q, want a and b", from, to, got)
		}
		req.From = t0
		if got := walk(req); !slices.Equal(got, []string{k("a"), k("b"), k("before")}) {
			t.Fatalf("walk DONE from the start = %q", got)
		}
		req.State = driver.StateFailed
		if got := walk(req); !slices.Equal(got, []string{k("failed")}) {
			t.Fatalf("walk FAILED = %q", got)
		}
		// Past retention: nothing.
		e.clock.Advance(Retention + time.Hour)
		req.State, req.Now = driver.StateDone, e.clock.Now()
		if got := walk(req); len(got) != 0 {
			t.Fatalf("walk past retention = %q, want none", got)
		}
		// An error from fn stops the walk and comes back.
		stop := errors.New("stop")
		req.Now, req.From = to, t0
		if err := driver.Walk(t.Context(), e.s, req, func(driver.Record) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("Walk with fn failing = %v, want fn's error", err)
		}
	}},
}
