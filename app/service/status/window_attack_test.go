package status_test

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
)

// status reads the posting window from the consumer's gauges and says
// "outside posting window until T" (issue 39: status, /readyz and a
// metric say it). A consumer whose window is closed must show so.
func TestAttackStatusShowsTheConsumersPostingWindow(t *testing.T) {
	for _, c := range []struct {
		open bool
		want string
	}{
		{false, "outside posting window until 2026-12-07T00:30:00Z"},
		{true, "posting window open until 2026-12-07T00:30:00Z"},
	} {
		m := metrics.New()
		m.PostingWindow(func() (bool, time.Time) {
			return c.open, time.Date(2026, 12, 7, 6, 0, 0, 0, time.FixedZone("IST", 19800))
		})
		srv := httptest.NewServer(m.Handler())
		rep, err := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), MetricsURL: srv.URL, Now: time.Now()})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		status.Print(&out, rep)
		if !strings.HasPrefix(rep.Consumer.Window, c.want) || !strings.Contains(out.String(), "window    "+c.want) {
			t.Errorf("open=%v: window %q, status:\n%s\nwant %q", c.open, rep.Consumer.Window, out.String(), c.want)
		}
	}
}
