//go:build knowndefects

package idemhttp_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/memstore"
)

// Known defect (attack 54; by the documented rule, "the slowest of the last
// 32 handled"): one request that hung for 10 minutes (a stuck downstream
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
