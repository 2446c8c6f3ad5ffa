package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
	"github.com/finedge/idempotent-consumer/app/tracing"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
)

const account = "001234567890"

func TestOneSpanPerMessageUnderTheProducersTraceWithItsStepsAsChildren(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	var mu sync.Mutex
	sentHeaders := map[string]string{} // idempotency key → traceparent on the debit request
	bankSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			sentHeaders[r.Header.Get(corebank.IdempotencyHeader)] = r.Header.Get("traceparent")
			mu.Unlock()
		}
		corebanksim.Handler(ledger).ServeHTTP(w, r)
	}))
	defer bankSrv.Close()

	c := pipeline.Config{Concurrency: 2, Visibility: 30 * time.Second, Lease: time.Minute, Retention: idempotency.DefaultRetention,
		ShutdownTimeout: 5 * time.Second, CorebankURL: bankSrv.URL, CorebankTimeout: 5 * time.Second, Declines: "422:DECLINED",
		HealthPath: "/healthz", CircuitAfter: 5, ProbeEvery: time.Second, ProbeMax: time.Second, NotifyTimeout: time.Second}
	bank, err := pipeline.NewBank(c, quiet)
	if err != nil {
		t.Fatal(err)
	}
	q := memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	pl, err := pipeline.New(pipeline.Ports{Source: q, Store: memstore.New(), Bank: bank, Notifier: notifysim.NewRecorder(0, quiet)}, c,
		pipeline.Options{Logger: quiet, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	producer := map[string]struct{ trace, parent string }{
		"CHG-W3C":  {"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		"CHG-XRAY": {"5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8"},
	}
	send := func(id string, attrs map[string]string) {
		body, err := charge.MarshalEvent(charge.Charge{ID: id, AccountID: account, Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Send(t.Context(), body, attrs); err != nil {
			t.Fatal(err)
		}
	}
	send("CHG-W3C", map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	send("CHG-XRAY", map[string]string{"AWSTraceHeader": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pl.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	spans := rec.Ended()
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID().String()] = s
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.String(), account) {
				t.Errorf("span %s attribute %s holds the account number", s.Name(), a.Key)
			}
		}
	}
	attr := func(s sdktrace.ReadOnlySpan, key string) string {
		for _, a := range s.Attributes() {
			if string(a.Key) == key {
				return a.Value.String()
			}
		}
		return ""
	}
	roots := 0
	for _, s := range spans {
		if s.Name() != "process charge" {
			continue
		}
		roots++
		id := attr(s, tracing.AttrChargeID)
		want, ok := producer[id]
		if !ok || attr(s, tracing.AttrOutcome) != "processed" {
			t.Fatalf("message span attributes %v", s.Attributes())
		}
		if s.SpanContext().TraceID().String() != want.trace || s.Parent().SpanID().String() != want.parent {
			t.Errorf("%s: trace %s parent %s, want the producer's %s / %s", id, s.SpanContext().TraceID(), s.Parent().SpanID(), want.trace, want.parent)
		}
		children := map[string]bool{}
		for _, c := range spans {
			if c.Parent().SpanID() == s.SpanContext().SpanID() {
				children[c.Name()] = true
				if attr(c, tracing.AttrChargeID) != id {
					t.Errorf("%s span of %s has charge id %q", c.Name(), id, attr(c, tracing.AttrChargeID))
				}
			}
		}
		for _, name := range []string{"claim", "debit", "notify", "finish"} {
			if !children[name] {
				t.Errorf("%s: no %s span under the message span (children %v)", id, name, children)
			}
		}
		mu.Lock()
		header := sentHeaders[id]
		mu.Unlock()
		if !strings.HasPrefix(header, "00-"+want.trace+"-") {
			t.Errorf("%s: the debit request carried traceparent %q, want one in trace %s", id, header, want.trace)
		}
	}
	if roots != 2 {
		t.Fatalf("%d message spans, want 2 (spans: %d)", roots, len(spans))
	}
}

func TestOffUnlessTheStandardVariablesConfigureAnExporter(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tp, _, err := tracing.Setup(t.Context(), env(nil), io.Discard)
	if err != nil || tp != nil {
		t.Fatalf("no OTEL_* variables: %v %v, want off", tp, err)
	}
	tp, stop, err := tracing.Setup(t.Context(), env(map[string]string{"OTEL_TRACES_EXPORTER": "console"}), io.Discard)
	if err != nil || tp == nil {
		t.Fatalf("console: %v %v", tp, err)
	}
	_ = stop(t.Context())
	if _, _, err := tracing.Setup(t.Context(), env(map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}), io.Discard); err == nil {
		t.Fatal("an unknown exporter was accepted")
	}
}

// A line logged while a message is handled carries the message's trace
// and span ids (here: the warning of a failed notification), so that an
// operator goes from the log line to the trace.
func TestLogLinesInsideAMessageCarryItsTraceID(t *testing.T) {
	var logs logbuf.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&logs, nil)))
	tp := sdktrace.NewTracerProvider()
	c := pipeline.Config{Concurrency: 1, Visibility: 30 * time.Second, Lease: time.Minute, Retention: idempotency.DefaultRetention,
		ShutdownTimeout: 5 * time.Second, NotifyTimeout: time.Second}
	q := memqueue.New(memqueue.Options{WaitTime: 20 * time.Millisecond})
	ledger := corebanksim.NewLedger(corebanksim.Faults{})
	pl, err := pipeline.New(pipeline.Ports{Source: q, Store: memstore.New(), Bank: pipeline.Bank{Debiter: ledger},
		Notifier: notifysim.NewRecorder(1, slog.New(slog.NewTextHandler(io.Discard, nil)))}, c, pipeline.Options{Logger: log, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	body, err := charge.MarshalEvent(charge.Charge{ID: "CHG-LOG", AccountID: account, Amount: charge.Money{Minor: 2500, Currency: "INR"},
		Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(t.Context(), body, map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- pl.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "pre-debit notification failed") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "pre-debit notification failed") {
			line = l
		}
	}
	if !strings.Contains(line, `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`) || !strings.Contains(line, `"span_id":"`) {
		t.Errorf("the line logged inside the message has no trace_id/span_id of its trace:\n%s", line)
	}
}
