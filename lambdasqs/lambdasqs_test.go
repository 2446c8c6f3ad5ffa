package lambdasqs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/finedge/idempotent-consumer/awssqs"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
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

// Attack 54 (issue 54 item 3): Guard.Do now returns a *NotRunError for
// the outcomes where the work did not run. Handler must keep reading them
// by their outcome — a key in progress retried (never dead-lettered as a
// store error, never deleted), a conflict and a key failed before
// dead-lettered under their own codes, a waiting key hidden — and not take
// the error for the store's.
func TestAttack54HandlerReadsNotRunByItsOutcome(t *testing.T) {
	store := memstore.New()
	guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	key := func(m events.SQSMessage) (string, error) { return strings.Fields(m.Body)[0], nil }
	fp := func(m events.SQSMessage) string { return lambdasqs.BodyFingerprint(m) }
	// Planted: "held" claimed by another invocation; "failed" FAILED;
	// "taken" DONE under another body; "later" WAITING.
	if c, err := guard.Claim(t.Context(), "held", fp(events.SQSMessage{Body: "held"})); err != nil || !c.Outcome.Owned() {
		t.Fatal(c.Outcome, err)
	}
	plant := func(body string, work func(context.Context, idempotency.Run) (idempotency.Done, error)) {
		k, _ := key(events.SQSMessage{Body: body})
		if _, err := guard.Do(t.Context(), k, fp(events.SQSMessage{Body: body}), work, idempotency.DoOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	plant("failed", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, fmt.Errorf("%w: declined", idempotency.ErrPermanent)
	})
	plant("taken first", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "DONE"}, nil
	})
	plant("later", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, &idempotency.Wait{Until: time.Now().Add(time.Hour), Status: "WAITING"}
	})

	var mu sync.Mutex
	dead := map[string]queue.Code{}
	var hidden []string
	ran := 0
	var log bytes.Buffer
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil)), Key: key,
		DeadLetter: func(_ context.Context, m events.SQSMessage, r queue.Reason) error {
			mu.Lock()
			defer mu.Unlock()
			dead[m.MessageId] = r.Code
			return nil
		},
		ChangeVisibility: func(_ context.Context, m events.SQSMessage, _ time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			hidden = append(hidden, m.MessageId)
			return nil
		}},
		func(context.Context, events.SQSMessage) error {
			mu.Lock()
			defer mu.Unlock()
			ran++
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-held", Body: "held"}, {MessageId: "m-failed", Body: "failed"},
		{MessageId: "m-taken", Body: "taken second"}, {MessageId: "m-later", Body: "later"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(failures(resp), ","); got != "m-held,m-later" {
		t.Errorf("records to retry %q, want m-held,m-later (in progress; waiting, hidden)", got)
	}
	if l := log.String(); !strings.Contains(l, `message_id=m-held reason="duplicate_in_progress`) || strings.Contains(l, string(lambdasqs.CodeUnavailable)) {
		t.Errorf("the key in progress is not named for retry as duplicate_in_progress (or something was taken for the store's error):\n%s", l)
	}
	if ran != 0 {
		t.Errorf("the work ran %d times, want never", ran)
	}
	want := map[string]queue.Code{"m-failed": lambdasqs.CodeDupFailed, "m-taken": lambdasqs.CodeConflict}
	if len(dead) != len(want) || dead["m-failed"] != want["m-failed"] || dead["m-taken"] != want["m-taken"] {
		t.Errorf("dead-lettered %v, want %v", dead, want)
	}
	if strings.Join(hidden, ",") != "m-later" {
		t.Errorf("visibility changed for %v, want m-later only", hidden)
	}
}

// ATTACK 1. A FIFO batch [a: permanent, b: ok] with a DeadLetter that
// fails: a is turned into a retry only after the loop, when b has already
// run and is deleted. The message group's order is broken: b's effect
// happened before a, and a comes back alone. The package promises that
// "once one is to be retried every later record of the batch is named too".
func TestAttackFIFODeadLetterFailureBreaksOrder(t *testing.T) {
	var ran []string
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet,
		DeadLetter: func(context.Context, events.SQSMessage, queue.Reason) error { return errors.New("DLQ unavailable") },
	}, func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
		ran = append(ran, m.MessageId)
		if m.Body == "bad" {
			return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: queue.Reason{Code: "invalid"}}
		}
		return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
	})
	if err != nil {
		t.Fatal(err)
	}
	arn := "arn:aws:sqs:us-east-1:123456789012:charges.fifo"
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "a", Body: "bad", EventSourceARN: arn}, {MessageId: "b", Body: "ok", EventSourceARN: arn}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(failures(resp), ","); got != "a,b" {
		t.Errorf("FIFO: a could not be dead-lettered and is retried, but failures = %q (b ran: %v and is deleted before a): want a,b", got, ran)
	}
}

// ATTACK 2. DeadLetter runs on context.WithoutCancel with 10s per record,
// after the work's deadline, sequentially. With the default Margin (2s) a
// DLQ that hangs holds the invocation past its deadline: Lambda times it
// out, the response is lost and the whole batch comes back — exactly what
// the comment in handle says the bound prevents.
func TestAttackDeadLetterOverrunsTheInvocationDeadline(t *testing.T) {
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: 100 * time.Millisecond, Lease: time.Minute, Logger: quiet,
		DeadLetter: func(ctx context.Context, _ events.SQSMessage, _ queue.Reason) error {
			<-ctx.Done() // a DLQ that hangs
			return ctx.Err()
		},
	}, func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
		return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: queue.Reason{Code: "invalid"}}
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second) // MinWork + Margin + a little
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	_, _ = h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "a", Body: "x"}}})
	if over := time.Since(deadline); over > 0 {
		t.Errorf("the handler answered %s after the invocation's deadline (Lambda would have timed it out; the whole batch comes back)", over.Round(time.Millisecond))
	}
}

// ATTACK 3. WholeBatchOnFailure with DeadLetter: a permanent record is sent
// to the DLQ, then the batch fails as a whole because another record is to
// be retried: the dead-lettered record comes back and is dead-lettered
// again (once per receive: N copies on the DLQ).
func TestAttackWholeBatchDeadLettersTwice(t *testing.T) {
	var sent atomic.Int32
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, WholeBatchOnFailure: true,
		DeadLetter: func(context.Context, events.SQSMessage, queue.Reason) error { sent.Add(1); return nil },
	}, func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
		if m.Body == "bad" {
			return lambdasqs.Verdict{Disposition: lambdasqs.Permanent, Reason: queue.Reason{Code: "invalid"}}
		}
		return lambdasqs.Verdict{Disposition: lambdasqs.Retry}
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "p", Body: "bad"}, {MessageId: "r", Body: "busy"}}}
	for range 2 { // the whole batch failed: Lambda delivers it again
		if _, err := h(t.Context(), ev); err == nil {
			t.Fatal("want the whole batch to fail")
		}
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("the permanent record was dead-lettered %d times (the whole batch failed after it was sent, so it came back): want 1", n)
	}
}

// failExtend is a store whose lease extensions fail (throttled, partitioned
// for writes to this item) while claims still work.
type failExtend struct{ driver.Store }

func (failExtend) Extend(context.Context, driver.ExtendRequest) error {
	return errors.New("ProvisionedThroughputExceededException")
}

// ATTACK 4. The package says the lease (≥ MinWork) alone covers the work
// even if every heartbeat fails. But the work's context is bounded by the
// invocation's deadline (- Margin), never by MinWork: a work that honours
// its context but takes longer than MinWork outlives the lease, and a
// second invocation reclaims the key and runs it again while the first
// still runs.
func TestAttackWorkLongerThanMinWorkRunsTwice(t *testing.T) {
	store := failExtend{memstore.New()}
	guard, err := idempotency.NewGuard(store, idempotency.Options{Lease: 300 * time.Millisecond, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var running, maxRunning, runs atomic.Int32
	work := func(ctx context.Context, _ events.SQSMessage) error {
		runs.Add(1)
		n := running.Add(1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		defer running.Add(-1)
		select { // a bank call that takes 1s, cancelled only by ctx
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: 300 * time.Millisecond, Margin: 100 * time.Millisecond, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) { return m.Body, nil }}, work)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "charge-1"}}}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 500 * time.Millisecond) // the second invocation, after the lease
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = h(ctx, ev)
		})
	}
	wg.Wait()
	if maxRunning.Load() > 1 {
		t.Errorf("the work of one key ran %d times, %d at once: the work's context is not bounded by MinWork, so it outlived the lease", runs.Load(), maxRunning.Load())
	}
}

// hangExtend is a store whose lease extensions hang until their context
// ends (a slow store).
type hangExtend struct{ driver.Store }

func (hangExtend) Extend(ctx context.Context, _ driver.ExtendRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

// ATTACK 5. When the work ends, the record's heartbeat is stopped and
// stop() waits for a beat in flight, which is bounded only by Lease/3 (on
// a context the deadline does not reach). A work that fits its MinWork
// within the deadline is then answered after the deadline: Lambda times the
// invocation out and the whole batch comes back.
func TestAttackHeartbeatStopWaitsPastTheDeadline(t *testing.T) {
	guard, err := idempotency.NewGuard(hangExtend{memstore.New()}, idempotency.Options{Lease: 3 * time.Second, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: 1200 * time.Millisecond, Margin: 300 * time.Millisecond, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) { return m.Body, nil }},
		func(ctx context.Context, _ events.SQSMessage) error {
			time.Sleep(1100 * time.Millisecond) // within MinWork
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(1600 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: "charge-1"}}})
	if over := time.Since(deadline); over > 0 {
		t.Errorf("answered %s after the invocation's deadline (failures %v, err %v): a hung beat holds the record past the deadline", over.Round(time.Millisecond), failures(resp), err)
	}
}

// ATTACK 6. Handler refuses an empty key but takes a blank one (spaces, a
// message attribute formatted from a missing value): unrelated records with
// the same body share it, and the second is deleted as a duplicate without
// running. The promise: no key is a permanent failure, never a shared key.
func TestAttackBlankKeyIsShared(t *testing.T) {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h, err := lambdasqs.Handler(guard, lambdasqs.Options{MinWork: time.Second, Logger: quiet,
		Key: func(m events.SQSMessage) (string, error) {
			if a, ok := m.MessageAttributes["key"]; ok && a.StringValue != nil {
				return *a.StringValue, nil
			}
			return "", nil
		}},
		func(context.Context, events.SQSMessage) error { runs.Add(1); return nil })
	if err != nil {
		t.Fatal(err)
	}
	blank := " "
	attrs := map[string]events.SQSMessageAttribute{"key": {StringValue: &blank, DataType: "String"}}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "a", Body: `{"refund":10}`, MessageAttributes: attrs},
		{MessageId: "b", Body: `{"refund":10}`, MessageAttributes: attrs}}})
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() > 0 {
		t.Errorf("a blank key was claimed as a key: the work ran %d time(s), failures %v (b deleted as a duplicate of an unrelated a): want both permanent no_key", runs.Load(), failures(resp))
	}
}

// waitQueue records what a runner asks of its source queue for a Wait.
type waitQueue struct {
	mu       sync.Mutex
	requeued []string // "id until"
	hidden   []string // "id d"
	sendErr  error
	block    bool // Requeue blocks until its context ends
}

func (q *waitQueue) options(now time.Time) lambdasqs.Options {
	return lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet, Now: func() time.Time { return now },
		ChangeVisibility: func(_ context.Context, m events.SQSMessage, d time.Duration) error {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.hidden = append(q.hidden, fmt.Sprintf("%s %s", m.MessageId, d))
			return nil
		},
		Requeue: func(ctx context.Context, m events.SQSMessage, until time.Time) error {
			if q.block {
				<-ctx.Done()
				return ctx.Err()
			}
			if q.sendErr != nil {
				return q.sendErr
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			q.requeued = append(q.requeued, m.MessageId+" "+until.UTC().Format(time.RFC3339))
			return nil
		}}
}

func received(id string, count int, notBefore string) events.SQSMessage {
	m := events.SQSMessage{MessageId: id, Body: "k-" + id, EventSourceARN: "arn:aws:sqs:us-east-1:1:charges",
		Attributes: map[string]string{"ApproximateReceiveCount": fmt.Sprint(count)}}
	if notBefore != "" {
		m.MessageAttributes = map[string]events.SQSMessageAttribute{queue.NotBeforeAttribute: {DataType: "String", StringValue: aws.String(notBefore)}}
	}
	return m
}

// A Wait verdict on a record received before starts it over: a copy with
// the not-before is sent and the record left out of batchItemFailures (the
// mapping deletes it), nothing hidden. On its first receive it is hidden
// and named. A copy that cannot be sent falls back to the hide. On a FIFO
// queue it is always hidden.
func TestAWaitReceivedBeforeIsStartedOver(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	until := now.Add(20 * time.Hour)
	process := func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
		return lambdasqs.Verdict{Disposition: lambdasqs.Wait, Until: until}
	}
	fifo := received("f", 3, "")
	fifo.EventSourceARN = "arn:aws:sqs:us-east-1:1:charges.fifo"
	for _, tc := range []struct {
		name                      string
		rec                       events.SQSMessage
		sendErr                   error
		failures, requeued, hides string
	}{
		{"second receive", received("a", 2, ""), nil, "", "a 2030-01-02T23:00:00Z", ""},
		{"fifth receive", received("a", 5, ""), nil, "", "a 2030-01-02T23:00:00Z", ""},
		{"first receive", received("a", 1, ""), nil, "a", "", "a 11h55m0s"},
		{"no receive count", received("a", 0, ""), nil, "a", "", "a 11h55m0s"},
		{"send fails", received("a", 2, ""), errors.New("throttled"), "a", "", "a 11h55m0s"},
		{"fifo", fifo, nil, "f", "", "f 11h55m0s"},
	} {
		q := &waitQueue{sendErr: tc.sendErr}
		h, err := lambdasqs.Records(q.options(now), process)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{tc.rec}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(failures(resp), ","); got != tc.failures {
			t.Errorf("%s: failures %q, want %q", tc.name, got, tc.failures)
		}
		if got := strings.Join(q.requeued, ","); got != tc.requeued {
			t.Errorf("%s: requeued %q, want %q", tc.name, got, tc.requeued)
		}
		if got := strings.Join(q.hidden, ","); got != tc.hides {
			t.Errorf("%s: hidden %q, want %q", tc.name, got, tc.hides)
		}
	}
}

// A record whose not-before is still ahead is not processed (no claim, no
// store request): it waits again by the same rule, until the not-before.
// One whose not-before has passed, or is nonsense, is processed.
func TestARecordNotDueIsNotProcessed(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	nb := now.Add(3 * time.Hour).Format(time.RFC3339Nano)
	var ran []string
	process := func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
		ran = append(ran, m.MessageId)
		return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
	}
	q := &waitQueue{}
	h, err := lambdasqs.Records(q.options(now), process)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		received("first", 1, nb), received("again", 2, nb),
		received("due", 1, now.Add(-time.Second).Format(time.RFC3339Nano)), received("junk", 1, "tomorrow"),
		received("far", 1, now.Add(500*24*time.Hour).Format(time.RFC3339Nano)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ran, ","); got != "due,junk,far" {
		t.Errorf("processed %q, want due,junk,far: a record not due must not reach the store", got)
	}
	if got := strings.Join(failures(resp), ","); got != "first" {
		t.Errorf("failures %q, want first (again started over)", got)
	}
	if got := strings.Join(q.hidden, ","); got != "first 3h0m0s" {
		t.Errorf("hidden %q, want first for 3h", got)
	}
	if got := strings.Join(q.requeued, ","); got != "again 2030-01-02T06:00:00Z" {
		t.Errorf("requeued %q, want again until its not-before", got)
	}
}

// A Requeue that hangs is cut as a dead-letter send is (half the margin
// before the deadline), and the record falls back to being named.
func TestARequeueThatHangsIsBounded(t *testing.T) {
	q := &waitQueue{block: true}
	opts := q.options(time.Now())
	opts.Now = time.Now
	opts.Margin = 2 * time.Second
	h, err := lambdasqs.Records(opts, func(context.Context, events.SQSMessage, idempotency.Heartbeat) lambdasqs.Verdict {
		t.Error("processed a record not due")
		return lambdasqs.Verdict{Disposition: lambdasqs.Delete}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, err := h(ctx, events.SQSEvent{Records: []events.SQSMessage{received("a", 2, time.Now().Add(time.Hour).Format(time.RFC3339Nano))}})
	if took := time.Since(start); err != nil || took > time.Second || strings.Join(failures(resp), ",") != "a" {
		t.Errorf("took %s, failures %v, %v; want a, within half the margin before the deadline", took, failures(resp), err)
	}
}

// CopyAttributes keeps the record's string attributes but the dead-letter
// ones, and sets the not-before; without room for it the copy goes
// without.
func TestCopyAttributes(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	m := events.SQSMessage{Body: "b", MessageAttributes: map[string]events.SQSMessageAttribute{
		"trace": {DataType: "String", StringValue: aws.String("t1")}, queue.CodeAttribute: {DataType: "String", StringValue: aws.String("x")},
		queue.NotBeforeAttribute: {DataType: "String", StringValue: aws.String("old")}, "bin": {DataType: "Binary", BinaryValue: []byte{1}}}}
	got := lambdasqs.CopyAttributes(m, until)
	if len(got) != 2 || got["trace"] != "t1" || got[queue.NotBeforeAttribute] != "2030-01-02T03:04:05.000000006Z" {
		t.Errorf("CopyAttributes = %v", got)
	}
	full := events.SQSMessage{Body: "b", MessageAttributes: map[string]events.SQSMessageAttribute{}}
	for i := range queue.MaxAttributes {
		full.MessageAttributes[fmt.Sprint("a", i)] = events.SQSMessageAttribute{DataType: "String", StringValue: aws.String("v")}
	}
	if got := lambdasqs.CopyAttributes(full, until); len(got) != queue.MaxAttributes || got[queue.NotBeforeAttribute] != "" {
		t.Errorf("CopyAttributes of a full message = %v, want its %d attributes without the not-before", got, queue.MaxAttributes)
	}
	for n, want := range map[int]bool{0: false, 1: false, 2: true, 10: true} {
		if lambdasqs.StartsOver(n) != want {
			t.Errorf("StartsOver(%d) = %v", n, !want)
		}
	}
}

// On the emulator: a waiting record received for the second time is
// started over by RequeueTo on the real queue. The copy lands on the queue
// with the record's attributes and the not-before, the original is gone,
// and the copy's first receive (count 1) is hidden without processing.
func TestRequeueToOnSQS(t *testing.T) {
	cfg := awstest.Config(t)
	client := sqs.NewFromConfig(cfg)
	name := awstest.Name("lambdasqs-requeue")
	qs, err := awssqs.CreateQueues(t.Context(), client, awssqs.QueueSpec{Name: name, DLQName: name + "-dlq", VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	src, err := awssqs.New(client, awssqs.Options{QueueURL: qs.URL, DLQURL: qs.DLQURL, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Send(t.Context(), []byte("charge-1"), map[string]string{"traceparent": "00-abc-01"}); err != nil {
		t.Fatal(err)
	}
	receive := func() events.SQSMessage {
		t.Helper()
		out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(qs.URL), WaitTimeSeconds: 2,
			MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"All"}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
		}
		m := out.Messages[0]
		ev := events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Attributes: m.Attributes, EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:" + name, MessageAttributes: map[string]events.SQSMessageAttribute{}}
		for k, v := range m.MessageAttributes {
			ev.MessageAttributes[k] = events.SQSMessageAttribute{DataType: aws.ToString(v.DataType), StringValue: v.StringValue}
		}
		return ev
	}
	first := receive()
	if _, err := client.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(qs.URL),
		ReceiptHandle: aws.String(first.ReceiptHandle), VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	second := receive()
	if second.Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("second receive: count %q", second.Attributes["ApproximateReceiveCount"])
	}
	until := time.Now().Add(20 * time.Hour).UTC().Truncate(time.Millisecond)
	var ran []string
	h, err := lambdasqs.Records(lambdasqs.Options{MinWork: time.Second, Lease: time.Minute, Logger: quiet,
		ChangeVisibility: func(ctx context.Context, m events.SQSMessage, d time.Duration) error {
			return src.ChangeVisibility(ctx, lambdasqs.MessageOf(m), d)
		},
		Requeue: lambdasqs.RequeueTo(src, quiet)},
		func(_ context.Context, m events.SQSMessage, _ idempotency.Heartbeat) lambdasqs.Verdict {
			ran = append(ran, m.MessageId)
			return lambdasqs.Verdict{Disposition: lambdasqs.Wait, Until: until}
		})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{second}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, %v; want none (started over)", failures(resp), err)
	}
	cp := receive()
	if cp.MessageId == second.MessageId || cp.Body != "charge-1" || cp.Attributes["ApproximateReceiveCount"] != "1" {
		t.Fatalf("copy: %+v", cp)
	}
	nb := aws.ToString(cp.MessageAttributes[queue.NotBeforeAttribute].StringValue)
	if got, err := time.Parse(time.RFC3339Nano, nb); err != nil || !got.Equal(until) || aws.ToString(cp.MessageAttributes["traceparent"].StringValue) != "00-abc-01" {
		t.Fatalf("copy's attributes %v: not-before %q, want %s and the traceparent", cp.MessageAttributes, nb, until)
	}
	// The copy's first receive: not processed, hidden.
	resp, err = h(t.Context(), events.SQSEvent{Records: []events.SQSMessage{cp}})
	if err != nil || strings.Join(failures(resp), ",") != cp.MessageId {
		t.Fatalf("copy: failures %v, %v; want it named (hidden)", failures(resp), err)
	}
	if !slices.Equal(ran, []string{second.MessageId}) {
		t.Errorf("processed %v, want only the original's second receive", ran)
	}
	out, err := client.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(qs.URL), WaitTimeSeconds: 1})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("after the copy was hidden: %d messages on the queue (%v), want none (the original deleted)", len(out.Messages), err)
	}
	d, err := src.Depth(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Waiting != 0 || d.InFlight != 1 {
		t.Errorf("depth %+v, want the hidden copy alone", d)
	}
}
