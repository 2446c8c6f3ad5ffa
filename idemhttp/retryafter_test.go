package idemhttp_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

// steppedHandler takes `took` of the guard's clock, then waits for release
// before it answers: a request held in flight for as long as a test needs.
type steppedHandler struct {
	clock   *storetest.Clock
	took    time.Duration
	entered chan struct{}
	release chan struct{}
}

func (h *steppedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.entered <- struct{}{}
	<-h.release
	h.clock.Advance(h.took)
	w.WriteHeader(http.StatusCreated)
}

// A 409 for a key in progress says when the work will likely be done, not
// when the lease runs out: the option, else the 90th percentile of the
// requests handled lately, less what has already passed — at least 1 s, never past the
// lease (60 s here).
func TestRetryAfterComesFromTheWorkNotTheLease(t *testing.T) {
	for _, tt := range []struct {
		name     string
		expected time.Duration // Options.ExpectedDuration
		earlier  time.Duration // one request handled before, this long (0: none)
		elapsed  time.Duration // how long the request in flight has run
		want     string
	}{
		{"no request handled yet: 1 s", 0, 0, 0, "1"},
		{"the last request took 3 s", 0, 3 * time.Second, 0, "3"},
		{"took 3 s, 2 s of it passed", 0, 3 * time.Second, 2 * time.Second, "1"},
		{"took 3 s, 10 s passed: at least 1 s", 0, 3 * time.Second, 10 * time.Second, "1"},
		{"the option: 7 s", 7 * time.Second, 3 * time.Second, 0, "7"},
		{"never past the lease", 10 * time.Minute, 0, 0, "60"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
			if err != nil {
				t.Fatal(err)
			}
			h := &steppedHandler{clock: clock, entered: make(chan struct{}, 1), release: make(chan struct{})}
			srv := newServer(t, h, idemhttp.Options{Guard: g, ExpectedDuration: tt.expected})
			if tt.earlier > 0 {
				h.took = tt.earlier
				go func() { <-h.entered; h.release <- struct{}{} }()
				if a := send(t, "POST", srv.URL+"/p", "earlier", "{}"); a.status != http.StatusCreated {
					t.Fatalf("the earlier request: %d %s", a.status, a.body)
				}
			}
			h.took = 0
			first := make(chan answer, 1)
			go func() { first <- send(t, "POST", srv.URL+"/p", "K", "{}") }()
			<-h.entered
			clock.Advance(tt.elapsed)
			a := send(t, "POST", srv.URL+"/p", "K", "{}")
			close(h.release)
			if a.status != http.StatusConflict || a.header.Get("Retry-After") != tt.want {
				t.Errorf("the duplicate got %d with Retry-After %q, want 409 with %q", a.status, a.header.Get("Retry-After"), tt.want)
			}
			if f := <-first; f.status != http.StatusCreated {
				t.Errorf("the first request: %d %s", f.status, f.body)
			}
		})
	}
}

// Attack 54 (issue 54 item 4): the 409's Retry-After comes from the work
// (Options.ExpectedDuration, else the 90th percentile of the last 32 handled), less
// the time since the key's first claim; at least 1 s, never past the lease.

// heldRequest sends key to srv with a steppedHandler behind it, holds it in
// the handler, and returns the release.
func heldRequest(t *testing.T, h *steppedHandler, url, key string) (release func() answer) {
	t.Helper()
	first := make(chan answer, 1)
	go func() { first <- send(t, "POST", url, key, "{}") }()
	<-h.entered
	return func() answer {
		h.release <- struct{}{}
		return <-first
	}
}

// Two servers share a store; the one that took the key first runs its
// clock ahead of the other's by 8 s, within the guard's SkewMargin (10 s
// here, a skew it says it tolerates). The key's CreatedAt is then 8 s in
// the other server's future: "the time since the first claim" is negative,
// and the 409 said the expected 3 s plus the skew (11) — a skew turned
// into waiting time. Elapsed time is never negative: the 409 says 3.
func TestAttack54RetryAfterWithClockSkew(t *testing.T) {
	store := memstore.New()
	ahead := storetest.NewClock(storetest.Epoch.Add(8 * time.Second))
	behind := storetest.NewClock(storetest.Epoch)
	guard := func(c *storetest.Clock) *idempotency.Guard {
		g, err := idempotency.NewGuard(store, idempotency.Options{Lease: time.Minute, Clock: c, SkewMargin: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	h := &steppedHandler{clock: ahead, entered: make(chan struct{}, 1), release: make(chan struct{})}
	a := newServer(t, h, idemhttp.Options{Guard: guard(ahead), ExpectedDuration: 3 * time.Second})
	b := newServer(t, h, idemhttp.Options{Guard: guard(behind), ExpectedDuration: 3 * time.Second})
	release := heldRequest(t, h, a.URL+"/p", "K")
	dup := send(t, "POST", b.URL+"/p", "K", "{}")
	if f := release(); f.status != http.StatusCreated {
		t.Fatalf("the first request: %d %s", f.status, f.body)
	}
	if dup.status != http.StatusConflict || dup.header.Get("Retry-After") != "3" {
		t.Fatalf("the duplicate on the server whose clock is 8 s behind: %d, Retry-After %q; want 409 with 3 (the expected duration; no time has passed)",
			dup.status, dup.header.Get("Retry-After"))
	}
}

// A reclaimed key (Attempt > 1: here the first request's handler answered
// 503, NotStarted, and gave the key back) started its run now, not when the
// key was first claimed: the 409 says the whole expected duration, not
// "1" from the first claim's time long past.
func TestAttack54RetryAfterOfAReclaimedKey(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var shed sync.Once
	h := &steppedHandler{clock: clock, entered: make(chan struct{}, 1), release: make(chan struct{})}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := false
		shed.Do(func() { first = true })
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
	srv := newServer(t, handler, idemhttp.Options{Guard: g, ExpectedDuration: 3 * time.Second,
		NotStarted: func(status int) bool { return status == http.StatusServiceUnavailable }})
	if a := send(t, "POST", srv.URL+"/p", "K", "{}"); a.status != http.StatusServiceUnavailable {
		t.Fatalf("the shed request: %d %s", a.status, a.body)
	}
	clock.Advance(100 * time.Second)
	release := heldRequest(t, h, srv.URL+"/p", "K")
	dup := send(t, "POST", srv.URL+"/p", "K", "{}")
	if f := release(); f.status != http.StatusCreated {
		t.Fatalf("the retry that ran: %d %s", f.status, f.body)
	}
	if dup.status != http.StatusConflict || dup.header.Get("Retry-After") != "3" {
		t.Fatalf("a duplicate of the reclaimed run: %d, Retry-After %q; want 409 with 3", dup.status, dup.header.Get("Retry-After"))
	}
}

// A handler that panics after 50 s is not a duration to expect: the key is
// FAILED, never in progress again. The estimate stays the 2 s request's.
func TestAttack54RetryAfterIgnoresAPanic(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := &steppedHandler{clock: clock, entered: make(chan struct{}, 1), release: make(chan struct{})}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "P" {
			clock.Advance(50 * time.Second)
			panic("boom")
		}
		h.ServeHTTP(w, r)
	})
	srv := newServer(t, handler, idemhttp.Options{Guard: g, Logger: slog.New(slog.DiscardHandler)})
	h.took = 2 * time.Second
	if f := heldRequest(t, h, srv.URL+"/p", "E")(); f.status != http.StatusCreated {
		t.Fatalf("the 2 s request: %d", f.status)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/p", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "P")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close() // net/http ends the connection on a handler's panic
	}
	h.took = 0
	release := heldRequest(t, h, srv.URL+"/p", "K")
	dup := send(t, "POST", srv.URL+"/p", "K", "{}")
	release()
	if dup.status != http.StatusConflict || dup.header.Get("Retry-After") != "2" {
		t.Fatalf("after a 2 s request and a panic at 50 s: %d, Retry-After %q; want 409 with 2", dup.status, dup.header.Get("Retry-After"))
	}
}

// Many requests at once, each with a duplicate, on the wall clock: the
// running estimate is shared (run with -race), and every 409's Retry-After
// is a whole number of seconds from 1 to the lease.
func TestAttack54RetryAfterConcurrent(t *testing.T) {
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	})
	srv := newServer(t, handler, idemhttp.Options{Guard: g})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := range 40 {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := send(t, "POST", srv.URL+"/p", fmt.Sprintf("K%d", i%20), "{}")
				if a.status != http.StatusConflict {
					return
				}
				var s int
				if _, err := fmt.Sscanf(a.header.Get("Retry-After"), "%d", &s); err != nil || s < 1 || s > 7 ||
					fmt.Sprint(s) != a.header.Get("Retry-After") {
					mu.Lock()
					bad = append(bad, a.header.Get("Retry-After"))
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("409s with Retry-After %q: want whole seconds from 1 to the lease", bad)
	}
}

// Attack 54 (fixed: the estimate is the 90th percentile, not the slowest):
// one request that hung for 10 minutes (a stuck downstream
// call, then an answer) makes every 409 for the next 32 handled requests
// say the whole lease (60) again — the issue's complaint ("clients that
// honour it wait a minute") — although the 31 requests since took 2 s
// each. The estimate is also one for the whole middleware: a slow route
// behind it sets every route's Retry-After. A high percentile, or the
// slowest of the last few per route, would not let one outlier pin it.
func TestAttack54RetryAfterPinnedByOneHang(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	g, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := &steppedHandler{clock: clock, entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv := newServer(t, h, idemhttp.Options{Guard: g})
	h.took = 10 * time.Minute
	heldRequest(t, h, srv.URL+"/p", "HUNG")()
	h.took = 2 * time.Second
	for i := range 31 {
		if a := heldRequest(t, h, srv.URL+"/p", fmt.Sprint("R", i))(); a.status != http.StatusCreated {
			t.Fatalf("request %d: %d", i, a.status)
		}
	}
	h.took = 0
	release := heldRequest(t, h, srv.URL+"/p", "K")
	dup := send(t, "POST", srv.URL+"/p", "K", "{}")
	release()
	if dup.status != http.StatusConflict || dup.header.Get("Retry-After") == "60" {
		t.Fatalf("after one 10-minute request and 31 of 2 s: %d, Retry-After %q (the whole lease)", dup.status, dup.header.Get("Retry-After"))
	}
}
