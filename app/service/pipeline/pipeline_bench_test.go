package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// BenchmarkMessage is the hot path per message, allocations included
// (-benchmem): runtime, parse, claim, debit, notify, DONE, ack, on the
// in-memory queue and store with the in-process bank, so that what is
// counted is this code, not a database's.
func BenchmarkMessage(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	q := memqueue.New(memqueue.Options{VisibilityTimeout: time.Minute, WaitTime: 5 * time.Millisecond})
	bodies := make([]queue.Outgoing, b.N)
	for i := range bodies {
		body, err := charge.MarshalEvent(charge.Charge{ID: fmt.Sprintf("CHG-%d", i), AccountID: "001234567890",
			Amount: charge.Money{Minor: 2500, Currency: "INR"}, Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = queue.Outgoing{Body: body}
	}
	if _, err := q.SendBatch(b.Context(), bodies); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	pl, err := pipeline.New(
		pipeline.Ports{Source: q, Store: memstore.New(), Bank: pipeline.Bank{Debiter: corebanksim.NewLedger(corebanksim.Faults{})}, Notifier: notifysim.NewRecorder(0, quiet)},
		pipeline.Config{Concurrency: 16, Visibility: time.Minute, Lease: time.Minute, Retention: idempotency.DefaultRetention,
			ShutdownTimeout: time.Second, NotifyTimeout: time.Second},
		pipeline.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	go func() { _ = pl.Run(ctx); close(done) }()
	for q.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancel()
	<-done
}
