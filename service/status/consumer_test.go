package status_test

import (
	"context"
	"errors"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/metrics"
	"github.com/finedge/idempotent-consumer/service/status"
)

type bank struct{ fail bool }

func (b bank) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	if b.fail {
		return charge.DebitReceipt{}, errors.New("timeout")
	}
	time.Sleep(2 * time.Millisecond)
	return charge.DebitReceipt{Reference: "CBS1"}, nil
}

// The console's charts read the consumer's debit counters and latency
// histogram from its /metrics.
func TestCollectReadsTheConsumersDebits(t *testing.T) {
	m := metrics.New()
	ok, bad := m.Debiter(bank{}), m.Debiter(bank{fail: true})
	for range 3 {
		if _, err := ok.Debit(t.Context(), charge.DebitRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = bad.Debit(t.Context(), charge.DebitRequest{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	rep, err := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), MetricsURL: srv.URL, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Consumer.Debits
	if !d.Known || d.Succeeded != 3 || d.Calls != 4 || d.Seconds < 0.006 {
		t.Fatalf("debits %+v, want 3 succeeded of 4 calls, 6 ms or more", d)
	}
	if n := len(d.Buckets); n < 5 || d.Buckets[math.Inf(1)] != 4 {
		t.Fatalf("buckets %v", d.Buckets)
	}
}
