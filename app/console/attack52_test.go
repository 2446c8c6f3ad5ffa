package console_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// scanningStore is a store whose stuck claims and IN_PROGRESS listing are
// a Scan of a table too big to read in a page's time (DynamoDB's: 60
// million records take minutes): each call reads until its context ends.
type scanningStore struct {
	*memstore.Store
	stopped atomic.Int32 // calls whose context ended (the Scan stopped)
}

func (s *scanningStore) Stuck(ctx context.Context, _ time.Time, _ int) ([]driver.Record, int, error) {
	<-ctx.Done()
	s.stopped.Add(1)
	return nil, 0, driver.Unavailable("scan", ctx.Err())
}

func (s *scanningStore) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	if req.State != driver.StateInProgress {
		return s.Store.ListState(ctx, req)
	}
	<-ctx.Done()
	s.stopped.Add(1)
	return driver.ListPage{}, driver.Unavailable("scan", ctx.Err())
}

// Review 52: on DynamoDB the Stuck page and the IN_PROGRESS records page
// are a Scan of the whole table, minutes on a large one, inside a request
// the console's server gives up writing after 30s (WriteTimeout): the
// page never came, and the Scan ran on to its end (millions of read
// units) after the browser had gone, once more at every reload. The
// console waits ScanWait for them, then stops the read and says to run
// chargerecovery stuck.
func TestAttack52DynamoTheStuckPageStopsAScanThatCannotAnswerInTime(t *testing.T) {
	w := newWorld(t)
	st := &scanningStore{Store: w.store}
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) {
		o.Store = st
		o.ScanWait = 200 * time.Millisecond
	})
	for _, path := range []string{"/stuck", "/records?state=IN_PROGRESS"} {
		done := make(chan struct{})
		var code int
		var body string
		go func() {
			defer close(done)
			code, body = as(t, "vera", http.MethodGet, srv.URL+path, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("GET %s: no answer after 10s (the Scan still reading)", path)
		}
		if code != http.StatusGatewayTimeout || !strings.Contains(body, "chargerecovery stuck") {
			t.Errorf("GET %s = %d %q, want 504 naming chargerecovery stuck", path, code, body)
		}
	}
	if got := st.stopped.Load(); got != 2 {
		t.Errorf("%d reads stopped, want 2", got)
	}
}
