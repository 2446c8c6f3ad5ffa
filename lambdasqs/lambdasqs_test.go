package lambdasqs_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func failures(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func TestOptionsRefused(t *testing.T) {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := func(m events.SQSMessage) (string, error) { return m.Body, nil }
	work := func(context.Context, events.SQSMessage) error { return nil }
	for name, o := range map[string]lambdasqs.Options{
		"no MinWork":              {Key: key},
		"no key":                  {MinWork: time.Second},
		"lease shorter than work": {MinWork: 6 * time.Second, Key: key},
	} {
		if _, err := lambdasqs.Handler(guard, o, work); !errors.Is(err, lambdasqs.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// retryTheRetries retries a record whose body is "retry" and deletes
// every other.
func retryTheRetries(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
	if m.Body == "retry" {
		return lambdasqs.Verdict{Disposition: lambdasqs.Retry}
	}
	return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
}

// A FIFO batch stops at the first record to retry: every later one is
// named too, so that a message group keeps its order.
func TestFIFOStopsAtTheFirstRetry(t *testing.T) {
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, Concurrency: 4},
		retryTheRetries)
	if err != nil {
		t.Fatal(err)
	}
	arn := "arn:aws:sqs:us-east-1:123456789012:charges.fifo"
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "a", Body: "ok", EventSourceARN: arn}, {MessageId: "b", Body: "retry", EventSourceARN: arn},
		{MessageId: "c", Body: "ok", EventSourceARN: arn}}})
	if err != nil || strings.Join(failures(resp), ",") != "b,c" {
		t.Fatalf("failures %v, %v; want b,c", failures(resp), err)
	}
}

// Where the mapping is not known to report batch item failures, a batch
// with a record to retry fails as a whole; one without does not.
func TestWholeBatchOnFailure(t *testing.T) {
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, WholeBatchOnFailure: true},
		retryTheRetries)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "ok"}}}); err != nil {
		t.Fatalf("all done: %v", err)
	}
	if _, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "ok"}, {MessageId: "b", Body: "retry"}}}); err == nil {
		t.Fatal("a record to retry and no partial batch response: the batch did not fail")
	}
}

// A permanent failure the DLQ refuses is named for retry, not lost.
func TestDeadLetterFailureRetries(t *testing.T) {
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet,
		DeadLetter: func(context.Context, events.SQSMessage, queue.Reason) error { return errors.New("DLQ down") }},
		func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
			return lambdasqs.Verdict{Disposition: lambdasqs.Permanent}
		})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a"}}})
	if err != nil || strings.Join(failures(resp), ",") != "a" {
		t.Fatalf("failures %v, %v; want a", failures(resp), err)
	}
}

// fakeLambda answers ListEventSourceMappings (GET
// /2015-03-31/event-source-mappings/) as the Lambda API does.
func fakeLambda(t *testing.T, status int, pages ...string) *lambda.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/2015-03-31/event-source-mappings") || r.URL.Query().Get("FunctionName") != "charges-fn" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if status != http.StatusOK {
			w.Header().Set("X-Amzn-Errortype", "AccessDeniedException")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"Message":"not authorized to perform: lambda:ListEventSourceMappings"}`)
			return
		}
		page := 0
		if r.URL.Query().Get("Marker") != "" {
			page = 1
		}
		_, _ = io.WriteString(w, pages[page])
	}))
	t.Cleanup(srv.Close)
	return lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), RetryMaxAttempts: 1})
}

func TestCheckMapping(t *testing.T) {
	const (
		with    = `{"UUID":"u-1","EventSourceArn":"arn:aws:sqs:us-east-1:1:charges","FunctionResponseTypes":["ReportBatchItemFailures"],"State":"Enabled"}`
		without = `{"UUID":"u-2","EventSourceArn":"arn:aws:sqs:us-east-1:1:charges","FunctionResponseTypes":[],"State":"Enabled"}`
		kinesis = `{"UUID":"u-3","EventSourceArn":"arn:aws:kinesis:us-east-1:1:stream/x","State":"Enabled"}`
	)
	page := func(next string, ms ...string) string {
		s := `{"EventSourceMappings":[` + strings.Join(ms, ",") + `]`
		if next != "" {
			s += `,"NextMarker":"` + next + `"`
		}
		return s + "}"
	}
	for _, tc := range []struct {
		name   string
		status int
		pages  []string
		want   error
	}{
		{"reports batch item failures", 200, []string{page("", with, kinesis)}, nil},
		{"no mapping yet", 200, []string{page("")}, nil},
		{"without ReportBatchItemFailures", 200, []string{page("", with, without)}, lambdasqs.ErrNoPartialBatch},
		{"without, on the second page", 200, []string{page("m2", with), page("", without)}, lambdasqs.ErrNoPartialBatch},
		{"no permission", 403, nil, lambdasqs.ErrCannotTell},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lambdasqs.CheckMapping(t.Context(), fakeLambda(t, tc.status, tc.pages...), "charges-fn")
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if errors.Is(err, lambdasqs.ErrNoPartialBatch) && !strings.Contains(err.Error(), "u-2") {
				t.Fatalf("the error does not name the mapping: %v", err)
			}
		})
	}
	if err := lambdasqs.CheckMapping(t.Context(), fakeLambda(t, 200), ""); !errors.Is(err, lambdasqs.ErrCannotTell) {
		t.Fatalf("no function name: %v", err)
	}
}

// The one outcome → disposition table.
func TestVerdictOf(t *testing.T) {
	want := map[idempotency.Outcome]lambdasqs.Disposition{
		idempotency.Acquired: lambdasqs.Delete, idempotency.Reclaimed: lambdasqs.Delete, idempotency.DuplicateDone: lambdasqs.Delete,
		idempotency.DuplicateInProgress: lambdasqs.Retry, idempotency.Unfinished: lambdasqs.Retry, idempotency.LeaseLost: lambdasqs.Retry,
		idempotency.Failed: lambdasqs.Permanent, idempotency.DuplicateFailed: lambdasqs.Permanent, idempotency.Conflict: lambdasqs.Permanent,
		idempotency.Waiting: lambdasqs.Wait,
	}
	for o, d := range want {
		if got := lambdasqs.VerdictOf(idempotency.DoResult{Outcome: o}).Disposition; got != d {
			t.Errorf("%v → %v, want %v", o, got, d)
		}
	}
	nb := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if v := lambdasqs.VerdictOf(idempotency.DoResult{Outcome: idempotency.Waiting, NotBefore: nb}); !v.Until.Equal(nb) || v.Reason.Code != lambdasqs.CodeWaiting {
		t.Errorf("waiting → %+v, want until %s", v, nb)
	}
	if got := lambdasqs.VerdictOf(idempotency.DoResult{Outcome: 99}).Disposition; got != lambdasqs.Retry {
		t.Errorf("an unknown outcome → %v, want retry", got)
	}
}

// Called with less than MinWork + Margin left, the handler claims nothing
// and names every record; the work never starts.
func TestNearDeadlineClaimsNothing(t *testing.T) {
	store := memstore.New()
	guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: 5 * time.Second, Margin: time.Second, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) { return m.Body, nil }},
		func(context.Context, events.SQSMessage) error { ran++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5500*time.Millisecond)
	defer cancel()
	resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "k1"}, {MessageId: "b", Body: "k2"}}})
	if err != nil || strings.Join(failures(resp), ",") != "a,b" || ran != 0 {
		t.Fatalf("failures %v, %v, work ran %d times; want a,b and no work", failures(resp), err, ran)
	}
	if _, err := store.Get(t.Context(), "k1", time.Now()); err == nil {
		t.Fatal("k1 was claimed by an invocation without time to run it")
	}
}

// The visibility of a record that waits: until its time, at most SQS's 12
// hours counted from the receive (less the batching window and the
// invocation's time so far), never negative.
func TestWaitVisibility(t *testing.T) {
	began := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	most := 12*time.Hour - lambdasqs.BatchingWindow
	for _, c := range []struct {
		name       string
		until, now time.Time
		want       time.Duration
	}{
		{"an hour ahead", began.Add(time.Hour), began, time.Hour},
		{"three days ahead", began.Add(72 * time.Hour), began, most},
		{"three days ahead, a minute into the invocation", began.Add(72 * time.Hour), began.Add(time.Minute), most - time.Minute},
		{"due", began.Add(-time.Second), began, 0},
	} {
		if got := lambdasqs.WaitVisibility(c.until, began, c.now); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// A record whose key waits is named in batchItemFailures (never deleted)
// and made invisible until its time, at most 12 hours at a time: on Lambda
// a wait costs one receive per 12 hours. A later delivery before the time
// finds the record WAITING and does not run the work.
func TestAWaitingRecordIsHiddenUntilItsTime(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	store := memstore.New()
	guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: time.Minute, Clock: fixedClock{now}, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	type change struct {
		id string
		d  time.Duration
	}
	var changes []change
	ran := 0
	until := map[string]time.Time{"k1": now.Add(time.Hour), "k2": now.Add(72 * time.Hour)}
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: time.Second, Logger: quiet, Now: func() time.Time { return now },
		Key: func(m events.SQSMessage) (string, error) { return m.Body, nil },
		ChangeVisibility: func(_ context.Context, m events.SQSMessage, d time.Duration) error {
			changes = append(changes, change{m.MessageId, d})
			return nil
		}},
		func(_ context.Context, m events.SQSMessage) error {
			ran++
			if u, ok := until[m.Body]; ok {
				return &idempotency.Wait{Until: u, Status: "WAITING", Detail: "next attempt scheduled"}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "k1"}, {MessageId: "b", Body: "k2"}, {MessageId: "c", Body: "k3"}}}
	for round := range 2 {
		resp, err := h(t.Context(), ev)
		if err != nil || strings.Join(failures(resp), ",") != "a,b" {
			t.Fatalf("round %d: failures %v, %v; want a,b (c done)", round, failures(resp), err)
		}
	}
	if ran != 3 {
		t.Errorf("work ran %d times, want 3: a waiting key's second delivery must not run it", ran)
	}
	want := []change{{"a", time.Hour}, {"b", 12*time.Hour - lambdasqs.BatchingWindow}, {"a", time.Hour}, {"b", 12*time.Hour - lambdasqs.BatchingWindow}}
	if len(changes) != len(want) {
		t.Fatalf("visibility changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Errorf("visibility change %d: %v, want %v", i, changes[i], want[i])
		}
	}
	rec, err := store.Get(t.Context(), "k1", now)
	if err != nil || rec.State != "WAITING" {
		t.Fatalf("k1: %+v, %v; want WAITING", rec, err)
	}
}

// A visibility change that fails leaves the record named for retry (it
// comes back after the queue's visibility timeout); without
// ChangeVisibility it is named all the same.
func TestAWaitWhoseVisibilityCannotBeSetIsStillNamed(t *testing.T) {
	for name, cv := range map[string]func(context.Context, events.SQSMessage, time.Duration) error{
		"fails": func(context.Context, events.SQSMessage, time.Duration) error { return errors.New("throttled") },
		"unset": nil,
	} {
		h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, ChangeVisibility: cv},
			func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
				return lambdasqs.Verdict{Disposition: lambdasqs.Wait, Until: time.Now().Add(time.Hour)}
			})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "k1"}}})
		if err != nil || strings.Join(failures(resp), ",") != "a" {
			t.Errorf("%s: failures %v, %v; want a", name, failures(resp), err)
		}
	}
}

// fixedClock is the guard's clock, stopped.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }
