package console_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/console"
	"github.com/finedge/idempotent-consumer/queue"
)

// hugeDLQ is a queue whose DLQ holds n entries, made as they are visited
// (the queue itself keeps none), noting the heap the reader holds once it
// has seen them all.
type hugeDLQ struct {
	queue.Operator
	n        int
	body     []byte
	heldPeak atomic.Uint64
}

func (q *hugeDLQ) Redrive(ctx context.Context, o queue.RedriveOptions) (queue.RedriveReport, error) {
	if !o.DryRun {
		return q.Operator.Redrive(ctx, o)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	at := time.Now().Add(-time.Hour)
	for i := range q.n {
		e := queue.DLQEntry{ID: fmt.Sprintf("m-%08d", i), Reason: queue.Reason{Code: "debit_failed", Detail: "debit declined: INSUFFICIENT_FUNDS"},
			At: at.Add(time.Duration(i) * time.Millisecond), Body: q.body, SourceID: fmt.Sprintf("s-%08d", i), ReceiveCount: 1}
		if o.Match != nil && !o.Match(e) {
			continue
		}
		if o.Visit != nil {
			o.Visit(e, queue.Move)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	for after.HeapAlloc > before.HeapAlloc {
		old := q.heldPeak.Load()
		if held := after.HeapAlloc - before.HeapAlloc; held <= old || q.heldPeak.CompareAndSwap(old, held) {
			break
		}
	}
	return queue.RedriveReport{DryRun: true, Seen: q.n}, nil
}

// The DLQ page shows the oldest 500 entries; on a huge DLQ (a month-end
// outage dead-letters everything) it must not hold every entry in memory
// to show 500: any viewer's reload would take the console's memory with it.
func TestAttack54ConsoleAHugeDLQIsNotHeldWholeToShowAPage(t *testing.T) {
	w := newWorld(t)
	body, err := charge.MarshalEvent(charge.Charge{ID: "CHG-HUGE-1", AccountID: account, Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee,
		DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60_000
	q := &hugeDLQ{Operator: w.q, n: n, body: body}
	srv := w.consoleWith(t, proxyAuth(), func(o *console.Options) { o.Queue = q; o.Refresh = time.Hour })
	code, page := as(t, "vera", "GET", srv.URL+"/dlq", nil)
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, page)
	}
	mustContain(t, "the DLQ page", page, fmt.Sprintf("%d entries, oldest first (the oldest 500 shown", n))
	if rows := strings.Count(page, `<tr data-charge=`); rows != 500 {
		t.Fatalf("%d rows shown, want the oldest 500", rows)
	}
	mustContain(t, "the oldest first", page, `/dlq/entry?id=m-00000000"`)
	if held := q.heldPeak.Load(); held > 8<<20 {
		t.Fatalf("the DLQ page held %d MiB for %d entries to show 500", held>>20, n)
	}
}
