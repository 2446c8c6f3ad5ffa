// Package tracing follows a charge from its producer to the debit with
// OpenTelemetry: one span per message, child spans for claim, debit,
// notify and finish, the charge id and the outcome as attributes (never the
// account number). The trace context comes from the message (a
// `traceparent` attribute, or SQS's AWSTraceHeader) and goes on the debit
// request (`traceparent` header). Like metrics, it instruments from the
// outside, by wrapping the ports; it is the only importer of OpenTelemetry.
//
// It is off unless the standard variables configure an exporter:
// OTEL_TRACES_EXPORTER=otlp (or an OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT)
// exports over OTLP/HTTP, OTEL_TRACES_EXPORTER=console writes spans to
// stderr; OTEL_SERVICE_NAME names the service (default chargerecovery).
package tracing

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Name is the instrumentation scope.
const Name = "github.com/finedge/idempotent-consumer"

// Setup returns the tracer provider the OTEL_* variables (read with
// getenv) ask for, and its shutdown (which flushes). With none set, it
// returns nil: tracing is off.
func Setup(ctx context.Context, getenv func(string) string, stderr io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if exporter == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		exporter = "otlp"
	}
	var exp sdktrace.SpanExporter
	var err error
	switch exporter {
	case "", "none":
		return nil, func(context.Context) error { return nil }, nil
	case "otlp":
		if p := getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
			return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is built in", p)
		}
		exp, err = otlptracehttp.New(ctx) // reads OTEL_EXPORTER_OTLP_* itself
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stderr))
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q is not otlp, console or none", exporter)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("trace exporter: %w", err)
	}
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "chargerecovery"
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(name))))
	return tp, tp.Shutdown, nil
}

var propagator = propagation.TraceContext{}

// Tracing wraps the ports of one pipeline.
type Tracing struct {
	tracer trace.Tracer
}

// New returns the wrappers for tp.
func New(tp trace.TracerProvider) *Tracing { return &Tracing{tracer: tp.Tracer(Name)} }

// Headers puts the current trace context on an outgoing request (the
// corebank client's Headers hook).
func Headers(ctx context.Context, h http.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// The attribute keys.
const (
	AttrChargeID     = "charge.id"
	AttrOutcome      = "charge.outcome"
	AttrMessageID    = "messaging.message.id"
	AttrReceiveCount = "messaging.receive_count"
)

// Handler wraps h: one span per message, a child of the producer's trace
// when the message carries one.
func (t *Tracing) Handler(h consumer.Handler) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, d *consumer.Delivery) consumer.Decision {
		ctx = Extract(ctx, d.Attributes)
		ctx, span := t.tracer.Start(ctx, "process charge", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String(AttrMessageID, d.ID), attribute.Int(AttrReceiveCount, d.ReceiveCount)))
		defer span.End()
		dec := h.Handle(ctx, d)
		span.SetAttributes(attribute.String("messaging.action", dec.Action.String()))
		if dec.Action == consumer.DeadLetter {
			span.SetStatus(codes.Error, string(dec.Reason.Code))
		}
		return dec
	})
}

// OnResult records the charge id and the outcome on the message's span
// (chargehandler.Options.OnResult).
func OnResult(ctx context.Context, _ queue.Message, c charge.Charge, r charge.Result) {
	span := trace.SpanFromContext(ctx)
	if c.ID != "" {
		span.SetAttributes(attribute.String(AttrChargeID, c.ID))
	}
	span.SetAttributes(attribute.String(AttrOutcome, r.Outcome.String()))
}

// Extract returns ctx with the trace context a message carries: a W3C
// `traceparent` attribute, else SQS's AWSTraceHeader
// (Root=1-{8 hex}-{24 hex};Parent={16 hex};Sampled=1).
func Extract(ctx context.Context, attrs map[string]string) context.Context {
	if attrs["traceparent"] != "" {
		return propagator.Extract(ctx, propagation.MapCarrier(attrs))
	}
	if h := attrs["AWSTraceHeader"]; h != "" {
		if tp := xrayToTraceparent(h); tp != "" {
			return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
		}
	}
	return ctx
}

func xrayToTraceparent(h string) string {
	var root, parent string
	sampled := "00"
	for _, part := range strings.Split(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Root":
			// 1-5759e988-bd862e3fe1be46a994272793
			fields := strings.Split(v, "-")
			if len(fields) == 3 && fields[0] == "1" && len(fields[1]) == 8 && len(fields[2]) == 24 {
				root = fields[1] + fields[2]
			}
		case "Parent":
			if len(v) == 16 {
				parent = v
			}
		case "Sampled":
			if v == "1" {
				sampled = "01"
			}
		}
	}
	if root == "" || parent == "" {
		return ""
	}
	return "00-" + root + "-" + parent + "-" + sampled
}

// Store wraps s: a span for each claim and finish.
func (t *Tracing) Store(s driver.Store) driver.Store { return &store{Store: s, t: t} }

type store struct {
	driver.Store
	t *Tracing
}

func (s *store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	ctx, span := s.t.tracer.Start(ctx, "claim", trace.WithAttributes(attribute.String(AttrChargeID, req.Key)))
	defer span.End()
	res, err := s.Store.Claim(ctx, req)
	end(span, err)
	if err == nil {
		span.SetAttributes(attribute.Bool("claim.acquired", res.Acquired), attribute.Bool("claim.reclaimed", res.Reclaimed),
			attribute.String("claim.state", string(res.Record.State)))
	}
	return res, err
}

func (s *store) Finish(ctx context.Context, f driver.FinishRequest) error {
	ctx, span := s.t.tracer.Start(ctx, "finish", trace.WithAttributes(attribute.String(AttrChargeID, f.Key),
		attribute.String("record.state", string(f.State)), attribute.String("record.status", f.Status)))
	defer span.End()
	err := s.Store.Finish(ctx, f)
	end(span, err)
	return err
}

// Debiter wraps d: a span per debit call (the request carries its trace
// context when the client's Headers hook is Headers).
func (t *Tracing) Debiter(d charge.Debiter) charge.Debiter {
	return debiter{d: d, t: t}
}

type debiter struct {
	d charge.Debiter
	t *Tracing
}

func (d debiter) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	ctx, span := d.t.tracer.Start(ctx, "debit", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String(AttrChargeID, req.IdempotencyKey), attribute.String("charge.currency", string(req.Amount.Currency))))
	defer span.End()
	rec, err := d.d.Debit(ctx, req)
	end(span, err)
	if err == nil {
		span.SetAttributes(attribute.String("corebank.reference", rec.Reference))
	}
	return rec, err
}

// Notifier wraps n: a span per notification.
func (t *Tracing) Notifier(n charge.Notifier) charge.Notifier { return notifier{n: n, t: t} }

type notifier struct {
	n charge.Notifier
	t *Tracing
}

func (n notifier) NotifyPreDebit(ctx context.Context, c charge.Charge, r charge.DebitReceipt) error {
	ctx, span := n.t.tracer.Start(ctx, "notify", trace.WithAttributes(attribute.String(AttrChargeID, c.ID)))
	defer span.End()
	err := n.n.NotifyPreDebit(ctx, c, r)
	end(span, err)
	return err
}

func end(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, charge.MaskText(err.Error()))
	}
}

// LogHandler adds trace_id and span_id to every record logged with a
// context that carries a span (the lines written while a message is
// handled), so that a log line leads to its trace and back.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}
func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }
