package idemhttp_test

import (
	"net/http"
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
