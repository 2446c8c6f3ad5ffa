package awsdynamodb_test

import (
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
)

// counting counts the requests sent, by operation (X-Amz-Target's suffix).
type counting struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	op = op[strings.LastIndex(op, ".")+1:]
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
	return c.base.RoundTrip(req)
}

// take returns the counts since the last take.
func (c *counting) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// A charge that waits (a declined debit retried in 24 hours) is WAITING in
// the sparse index: operators count and list it with Queries, it is never
// stuck, even past its not-before; its resume is not a reclaim, carries the
// generation and the history on, and costs the claim's PutItem plus the
// fenced UpdateItem, as a reclaim does; every finish is one PutItem.
func TestAWaitingChargeIsListedCountedNeverStuckAndResumed(t *testing.T) {
	rt := &counting{base: http.DefaultTransport.(*http.Transport).Clone(), n: map[string]int{}}
	s0, client := storeOver(t, rt, "waiting")
	api := &noScans{Client: client}
	s := storeThrough(t, api, s0.Table())
	ctx := t.Context()
	clock := storetest.NewClock(storetest.Epoch)
	g := guardOn(t, s, clock)
	charge := &storetest.RetriedCharge{Clock: clock}
	rt.take()
	charge.Wait(t, g, "CHG-W")
	if got, want := rt.take(), map[string]int{"PutItem": 2}; !maps.Equal(got, want) {
		t.Fatalf("claim and wait sent %v, want %v (one PutItem each)", got, want)
	}
	if got := indexKeys(t, client, s.Table()); got["CHG-W"] != "WAITING" {
		t.Fatalf("the index holds %v, want CHG-W under WAITING", got)
	}
	counts, err := s.CountByState(ctx, clock.Now())
	if err != nil || counts[driver.StateWaiting] != 1 || counts[driver.StateInProgress] != 0 {
		t.Fatalf("counts %v (%v), want WAITING 1, IN_PROGRESS 0", counts, err)
	}
	page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateWaiting, Limit: 10, Now: clock.Now()})
	charge.Listed(t, page, err, "CHG-W")
	for _, after := range []time.Duration{2 * time.Minute, 25 * time.Hour} { // within the wait, and past its not-before
		if stuck, n, err := s.Stuck(ctx, clock.Now().Add(after), 10); err != nil || n != 0 {
			t.Fatalf("Stuck %v on = %v %d %v, want none (a waiting record is not a stuck claim)", after, keys(stuck), n, err)
		}
	}

	clock.Advance(24 * time.Hour)
	rt.take()
	charge.Resume(t, g, "CHG-W")
	if got, want := rt.take(), map[string]int{"PutItem": 2, "UpdateItem": 1}; !maps.Equal(got, want) {
		t.Fatalf("resume and finish sent %v, want %v (the claim's PutItem and fenced UpdateItem, the finish's PutItem)", got, want)
	}
	charge.Debited(t, g, "CHG-W")
	if _, ok := indexKeys(t, client, s.Table())["CHG-W"]; ok {
		t.Fatal("a DONE DEBITED record is still in the index")
	}
	if got := api.scans.Load(); got != 0 {
		t.Fatalf("%d Scan(s): counts and lists of WAITING must be Queries (only IN_PROGRESS is a Scan)", got)
	}
}

// A reclaimer that read an IN_PROGRESS record whose lease passed, while
// its owner finished it to WAITING (the token kept) with a not-before the
// reclaimer's clock sees as passed, resumes the waiting record: its fenced
// write fails on the state, and the record it gets back is one it may take
// as a resume, not a reclaim (the run before ended cleanly).
func TestAReclaimThatFindsTheRecordWaitingResumesIt(t *testing.T) {
	const key = "CHG-RESUME/1.a"
	hooked, c, other := hookedPair(t, http.DefaultTransport.(*http.Transport).Clone(), "UpdateItem", "resume")
	ctx := t.Context()
	if r, err := other.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-A", Fingerprint: "fp", Now: msAt(0), LeaseExpiredBy: msAt(0),
		LeaseUntil: msAt(5), ExpiresAt: msAt(0).Add(time.Hour)}); err != nil || !r.Acquired {
		t.Fatalf("A's claim: %+v %v", r, err)
	}
	var ferr error
	hooked.hook = func() {
		ferr = other.Finish(ctx, driver.FinishRequest{Key: key, Token: "tok-A", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
			Now: msAt(5), ExpiresAt: msAt(5).Add(time.Hour), NotBefore: msAt(6), Generation: 2, History: []string{"generation 1: declined"}})
	}
	res, err := c.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-C", Fingerprint: "fp", Now: msAt(6), LeaseExpiredBy: msAt(6),
		LeaseUntil: msAt(9), ExpiresAt: msAt(6).Add(time.Hour)})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil || !res.Acquired || res.Reclaimed || res.Record.Token != "tok-C" || res.Record.Attempt != 2 ||
		res.Record.Generation != 2 || len(res.Record.History) != 1 || res.Record.Status != "" {
		t.Fatalf("C's claim = %+v %v, want the waiting record resumed (not reclaimed): attempt 2, generation 2, the history, no status", res, err)
	}
	rec, err := other.Get(ctx, key, msAt(6))
	if err != nil || rec.State != driver.StateInProgress || rec.Token != "tok-C" || rec.Status != "" || rec.Generation != 2 {
		t.Fatalf("record = %+v %v, want C's claim", rec, err)
	}
}

// A finish to WAITING, written whole from the claimed record (the Guard's
// way) or in place (a lease built by hand), sets the not-before, the
// status and the listing, and the generation and history when given
// (storetest.FinishToWaiting).
func TestAFinishToWaitingWritesItsFieldsWholeOrInPlace(t *testing.T) {
	s, client := newStore(t)
	storetest.FinishToWaiting(t, s, func(t *testing.T, key string) {
		if got := indexKeys(t, client, s.Table())[key]; got != "WAITING" {
			t.Fatalf("listState %q, want WAITING", got)
		}
	})
}
