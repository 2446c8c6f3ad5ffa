package lambdasqs_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/lambdasqs"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

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
