// Package queuetest is the conformance suite every queue.Queue passes, in
// the spirit of gocloud.dev's drivertest: one set of behaviours the
// consumer relies on (delivery, visibility, receipts, dead-lettering,
// redrive, depth), run against each implementation through a Harness.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// Options is what a test asks of a new queue.
type Options struct {
	// Visibility is the visibility timeout of every receive (whole seconds:
	// SQS rounds up).
	Visibility time.Duration
	// MaxReceiveCount moves a message to the DLQ after this many receives
	// without a delete (the queue's redrive policy).
	MaxReceiveCount int
}

// Harness opens a new, empty queue (and DLQ) per call; the harness removes
// it when the test ends.
type Harness struct {
	Open func(t *testing.T, o Options) queue.Queue
	// AcceptsStaleReceipts: SQS documents that a delete or visibility
	// change with an old receipt handle may succeed; a queue that refuses
	// them is tested for it.
	AcceptsStaleReceipts bool
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"SendReceiveKeepsBodyAndAttributes", testSendReceive},
		{"ReceiveReturnsAtMostMaxAndEachMessageOnce", testReceiveBatches},
		{"AckDeletes", testAckDeletes},
		{"UnackedComesBackAfterVisibilityWithHigherCount", testRedelivery},
		{"StaleReceiptCannotAckOrExtend", testStaleReceipt},
		{"ChangeVisibilityZeroRedeliversAtOnce", testVisibilityZero},
		{"ChangeVisibilityKeepsAMessageHidden", testVisibilityExtend},
		{"DeadLetterMovesBodyAttributesAndReason", testDeadLetter},
		{"MaxReceiveCountMovesToTheDLQ", testMaxReceives},
		{"SendBatchSendsEveryMessage", testSendBatch},
		{"DepthCountsWaitingInFlightAndDLQ", testDepth},
		{"RedriveMovesBackWhatTheOptionsAllow", testRedrive},
		{"ReceiveRejectsABadMax", testBadMax},
		{"DepthTellsTheOldestMessagesAge", testOldestAge},
		{"SendRefusesOversizeAndReservedAttributesAndWritesNothing", testSendRefuses},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, h)
		})
	}
}

// receive receives until it has want messages or wait passes; it fails the
// test if it got more than want.
func receive(t *testing.T, q queue.Queue, want int, wait time.Duration) []queue.Message {
	t.Helper()
	var got []queue.Message
	deadline := time.Now().Add(wait)
	for len(got) < want && time.Now().Before(deadline) {
		msgs, err := q.Receive(t.Context(), min(queue.MaxReceive, max(want-len(got), 1)))
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		got = append(got, msgs...)
	}
	if len(got) > want {
		t.Fatalf("received %d messages, want %d", len(got), want)
	}
	return got
}

func mustReceive(t *testing.T, q queue.Queue, want int) []queue.Message {
	t.Helper()
	got := receive(t, q, want, 15*time.Second)
	if len(got) != want {
		t.Fatalf("received %d messages, want %d", len(got), want)
	}
	return got
}

// nothing checks that no message is delivered for d.
func nothing(t *testing.T, q queue.Queue, d time.Duration, why string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		msgs, err := q.Receive(t.Context(), queue.MaxReceive)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(msgs) > 0 {
			t.Fatalf("%s: got message %s (receive count %d)", why, msgs[0].ID, msgs[0].ReceiveCount)
		}
	}
}

func send(t *testing.T, q queue.Queue, body string, attrs map[string]string) string {
	t.Helper()
	id, err := q.Send(t.Context(), []byte(body), attrs)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if id == "" {
		t.Fatal("send returned an empty id")
	}
	return id
}

func ack(t *testing.T, q queue.Queue, msgs ...queue.Message) {
	t.Helper()
	if err := q.Ack(t.Context(), msgs); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func depth(t *testing.T, q queue.Queue) queue.Depth {
	t.Helper()
	d, err := q.Depth(t.Context())
	if err != nil {
		t.Fatalf("depth: %v", err)
	}
	return d
}

// eventually polls cond (SQS's counts are approximate and lag).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s", what, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testSendReceive(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: 30 * time.Second})
	before := time.Now().Add(-time.Minute)
	attrs := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "producer": "billing"}
	id := send(t, q, `{"chargeId":"c-1"}`, attrs)
	m := mustReceive(t, q, 1)[0]
	if m.ID != id || string(m.Body) != `{"chargeId":"c-1"}` || m.ReceiveCount != 1 || m.Receipt == "" {
		t.Fatalf("received %+v, want id %s, the body, receive count 1 and a receipt", m, id)
	}
	if !maps.Equal(m.Attributes, attrs) {
		t.Fatalf("attributes %v, want %v", m.Attributes, attrs)
	}
	if m.SentAt.Before(before) || m.SentAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("SentAt %v is not about now", m.SentAt)
	}
	noAttrs := send(t, q, "plain", nil)
	m2 := mustReceive(t, q, 1)[0]
	if m2.ID != noAttrs || len(m2.Attributes) != 0 {
		t.Fatalf("message sent without attributes came back as %+v", m2)
	}
}

func testReceiveBatches(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: 30 * time.Second})
	sent := map[string]bool{}
	for i := range 15 {
		sent[send(t, q, fmt.Sprintf("m%d", i), nil)] = true
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(15 * time.Second)
	for len(seen) < 15 && time.Now().Before(deadline) {
		msgs, err := q.Receive(t.Context(), 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 4 {
			t.Fatalf("receive of 4 returned %d", len(msgs))
		}
		for _, m := range msgs {
			if seen[m.ID] || !sent[m.ID] {
				t.Fatalf("message %s delivered twice within its visibility timeout, or never sent", m.ID)
			}
			seen[m.ID] = true
		}
	}
	if len(seen) != 15 {
		t.Fatalf("received %d of 15", len(seen))
	}
}

func testAckDeletes(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Second})
	for i := range 3 {
		send(t, q, fmt.Sprintf("m%d", i), nil)
	}
	msgs := mustReceive(t, q, 3)
	ack(t, q, msgs...)
	nothing(t, q, 2500*time.Millisecond, "acked messages must not come back after the visibility timeout")
	eventually(t, "depth after ack", func() (bool, string) {
		d := depth(t, q)
		return d.Counts() == queue.Depth{}, fmt.Sprintf("%+v", d)
	})
	if err := q.Ack(t.Context(), nil); err != nil {
		t.Fatalf("ack of nothing: %v", err)
	}
}

func testRedelivery(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Second})
	id := send(t, q, "again", nil)
	first := mustReceive(t, q, 1)[0]
	second := mustReceive(t, q, 1)[0] // after the timeout
	if second.ID != id || second.ReceiveCount != 2 || second.Receipt == first.Receipt {
		t.Fatalf("redelivery %+v, want id %s, receive count 2 and a new receipt (first %q)", second, id, first.Receipt)
	}
	if second.SentAt.Sub(first.SentAt).Abs() > time.Millisecond {
		t.Fatalf("SentAt changed on redelivery: %v then %v", first.SentAt, second.SentAt)
	}
	ack(t, q, second)
}

func testStaleReceipt(t *testing.T, h Harness) {
	if h.AcceptsStaleReceipts {
		t.Skip("this queue may accept a stale receipt (as SQS documents); the claim, not the receipt, guards the effect")
	}
	q := h.Open(t, Options{Visibility: time.Second})
	send(t, q, "x", nil)
	other := send(t, q, "y", nil)
	var first, y queue.Message
	for _, m := range mustReceive(t, q, 2) {
		if m.ID == other {
			y = m
		} else {
			first = m
		}
	}
	time.Sleep(1100 * time.Millisecond)
	var second queue.Message
	for _, m := range mustReceive(t, q, 2) {
		if m.ID == first.ID {
			second = m
		} else {
			y = m
		}
	}
	if err := q.ChangeVisibility(t.Context(), first, time.Hour); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Fatalf("extend with a stale receipt: %v, want ErrStaleReceipt", err)
	}
	if err := q.DeadLetter(t.Context(), first, queue.Reason{Code: "x"}); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Fatalf("dead-letter with a stale receipt: %v, want ErrStaleReceipt", err)
	}
	err := q.Ack(t.Context(), []queue.Message{first, y})
	var be *queue.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || !errors.Is(be.Failed[first.ID], queue.ErrStaleReceipt) {
		t.Fatalf("ack of a stale and a current receipt: %v, want a BatchError naming only the stale one", err)
	}
	if d := depth(t, q); d.Waiting+d.InFlight != 1 {
		t.Fatalf("depth %+v: the stale ack must not delete, the current one must", d)
	}
	ack(t, q, second)
}

func testVisibilityZero(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Hour})
	send(t, q, "x", nil)
	m := mustReceive(t, q, 1)[0]
	if err := q.ChangeVisibility(t.Context(), m, 0); err != nil {
		t.Fatal(err)
	}
	again := mustReceive(t, q, 1)[0]
	if again.ID != m.ID || again.ReceiveCount != 2 {
		t.Fatalf("after visibility 0: %+v, want %s with receive count 2", again, m.ID)
	}
}

func testVisibilityExtend(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Second})
	send(t, q, "x", nil)
	m := mustReceive(t, q, 1)[0]
	if err := q.ChangeVisibility(t.Context(), m, time.Hour); err != nil {
		t.Fatal(err)
	}
	nothing(t, q, 2500*time.Millisecond, "a message extended by an hour")
	if d := depth(t, q); d.InFlight != 1 || d.Waiting != 0 {
		t.Fatalf("depth %+v, want 1 in flight", d)
	}
}

func testDeadLetter(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Second})
	attrs := map[string]string{"producer": "billing"}
	id := send(t, q, `{"broken"`, attrs)
	m := mustReceive(t, q, 1)[0]
	detail := "invalid charge event: not JSON " + strings.Repeat("é", 1000) // over the limit, multi-byte
	if err := q.DeadLetter(t.Context(), m, queue.Reason{Code: "invalid", Detail: detail}); err != nil {
		t.Fatal(err)
	}
	nothing(t, q, 2500*time.Millisecond, "a dead-lettered message must be gone from the queue")
	eventually(t, "depth after dead-letter", func() (bool, string) {
		d := depth(t, q)
		return d.Counts() == queue.Depth{DLQ: 1}, fmt.Sprintf("%+v", d)
	})
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Seen != 1 || rep.Moved != 1 || rep.SeenByCode["invalid"] != 1 {
		t.Fatalf("dry run %+v, want one invalid entry that would move", rep)
	}
	if _, err := q.Redrive(t.Context(), queue.RedriveOptions{}); err != nil {
		t.Fatal(err)
	}
	back := mustReceive(t, q, 1)[0]
	if string(back.Body) != `{"broken"` || !maps.Equal(back.Attributes, attrs) {
		t.Fatalf("redriven %q with %v, want the body and the original attributes only", back.Body, back.Attributes)
	}
	if back.ID == id && back.ReceiveCount != 1 {
		t.Fatalf("redriven message kept receive count %d", back.ReceiveCount)
	}
}

func testMaxReceives(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Second, MaxReceiveCount: 2})
	send(t, q, "poison", map[string]string{"producer": "billing"})
	mustReceive(t, q, 1)
	mustReceive(t, q, 1)
	// The third delivery must not happen: the queue moves it to the DLQ.
	deadline := time.Now().Add(20 * time.Second)
	for {
		msgs, err := q.Receive(t.Context(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			t.Fatalf("delivered a third time (receive count %d) past MaxReceiveCount 2", msgs[0].ReceiveCount)
		}
		if depth(t, q).DLQ == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not on the DLQ after its receives: depth %+v", depth(t, q))
		}
	}
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SeenByCode[queue.CodeMaxReceives] != 1 {
		t.Fatalf("DLQ entry codes %v, want one %s", rep.SeenByCode, queue.CodeMaxReceives)
	}
}

func testSendBatch(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: 30 * time.Second})
	var out []queue.Outgoing
	for i := range 25 {
		out = append(out, queue.Outgoing{Body: fmt.Appendf(nil, "b%02d", i), Attributes: map[string]string{"n": fmt.Sprint(i)}})
	}
	n, err := q.SendBatch(t.Context(), out)
	if err != nil || n != 25 {
		t.Fatalf("send batch: %d, %v; want 25", n, err)
	}
	var bodies []string
	for _, m := range mustReceive(t, q, 25) {
		if want := "b" + fmt.Sprintf("%02s", m.Attributes["n"]); string(m.Body) != want {
			t.Fatalf("message %q carries attribute n=%q", m.Body, m.Attributes["n"])
		}
		bodies = append(bodies, string(m.Body))
	}
	slices.Sort(bodies)
	if bodies[0] != "b00" || bodies[24] != "b24" || len(slices.Compact(bodies)) != 25 {
		t.Fatalf("bodies %v", bodies)
	}
	if n, err := q.SendBatch(t.Context(), nil); n != 0 || err != nil {
		t.Fatalf("empty batch: %d, %v", n, err)
	}
}

func testDepth(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Hour})
	if err := q.Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	for i := range 4 {
		send(t, q, fmt.Sprint(i), nil)
	}
	msgs := mustReceive(t, q, 2)
	if err := q.DeadLetter(t.Context(), msgs[0], queue.Reason{Code: "invalid"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "depth", func() (bool, string) {
		d := depth(t, q)
		return d.Counts() == queue.Depth{Waiting: 2, InFlight: 1, DLQ: 1}, fmt.Sprintf("%+v", d)
	})
}

func testRedrive(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Hour})
	codes := []queue.Code{"invalid", "debit_failed", "debit_failed", "conflict"}
	for i := range codes {
		send(t, q, fmt.Sprint(i), nil)
	}
	for i, m := range mustReceive(t, q, len(codes)) {
		if err := q.DeadLetter(t.Context(), m, queue.Reason{Code: codes[i], Detail: "because"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "DLQ depth", func() (bool, string) {
		d := depth(t, q)
		return d.DLQ == 4, fmt.Sprintf("%+v", d)
	})
	hold := []queue.Code{"conflict"}
	rep, err := q.Redrive(t.Context(), queue.RedriveOptions{Codes: []queue.Code{"debit_failed"}, Max: 1, HoldBack: hold})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 1 || rep.ByCode["debit_failed"] != 1 {
		t.Fatalf("redrive of one debit_failed: %+v", rep)
	}
	rep, err = q.Redrive(t.Context(), queue.RedriveOptions{HoldBack: hold})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 2 || rep.HeldBack != 1 || rep.ByCode["invalid"] != 1 || rep.ByCode["debit_failed"] != 1 {
		t.Fatalf("redrive of the rest: %+v, want 2 moved and the conflict held back", rep)
	}
	eventually(t, "depth after redrive", func() (bool, string) {
		d := depth(t, q)
		return d.Counts() == queue.Depth{Waiting: 3, DLQ: 1}, fmt.Sprintf("%+v", d)
	})
	rep, err = q.Redrive(t.Context(), queue.RedriveOptions{HoldBack: hold, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 1 || rep.ByCode["conflict"] != 1 {
		t.Fatalf("forced redrive: %+v", rep)
	}
	mustReceive(t, q, 4)
}

func testBadMax(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Second})
	for _, n := range []int{0, queue.MaxReceive + 1} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := q.Receive(ctx, n)
		cancel()
		if err == nil {
			t.Errorf("receive of %d: no error", n)
		}
	}
}

func testOldestAge(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: time.Hour})
	if d := depth(t, q); d.OldestKnown && d.OldestAge != 0 {
		t.Fatalf("empty queue: oldest age %v, want 0", d.OldestAge)
	}
	send(t, q, "old", nil)
	time.Sleep(1200 * time.Millisecond)
	send(t, q, "new", nil)
	mustReceive(t, q, 1) // in flight still counts
	d := depth(t, q)
	if !d.OldestKnown {
		t.Skip("this queue cannot tell the oldest message's age")
	}
	if d.OldestAge < time.Second || d.OldestAge > time.Minute {
		t.Fatalf("oldest age %v, want about 1.2s", d.OldestAge)
	}
}

// A message over queue.MaxMessageBytes, or with an attribute in the
// dead-letter namespace (which would let a producer choose the reason its
// message shows on the DLQ), is refused by Send and SendBatch before
// anything is written — a batch with one such message writes none.
func testSendRefuses(t *testing.T, h Harness) {
	q := h.Open(t, Options{Visibility: 30 * time.Second})
	big := make([]byte, queue.MaxMessageBytes+1)
	for name, tc := range map[string]struct {
		body  []byte
		attrs map[string]string
		want  error
	}{
		"a body over the limit":        {big, nil, queue.ErrTooLarge},
		"attributes over the limit":    {[]byte("{}"), map[string]string{"a": string(big[:queue.MaxMessageBytes])}, queue.ErrTooLarge},
		"a producer's dlq-reason":      {[]byte("{}"), map[string]string{queue.DetailAttribute: "looks legitimate"}, queue.ErrReservedAttribute},
		"a producer's dlq-reason-code": {[]byte("{}"), map[string]string{queue.CodeAttribute: "conflict"}, queue.ErrReservedAttribute},
	} {
		if _, err := q.Send(t.Context(), tc.body, tc.attrs); !errors.Is(err, tc.want) {
			t.Errorf("Send with %s: %v, want %v", name, err, tc.want)
		}
		n, err := q.SendBatch(t.Context(), []queue.Outgoing{{Body: []byte("fine")}, {Body: tc.body, Attributes: tc.attrs}})
		if n != 0 || !errors.Is(err, tc.want) {
			t.Errorf("SendBatch with %s: %d sent, %v; want 0, %v", name, n, err, tc.want)
		}
	}
	if _, err := q.Send(t.Context(), big[:queue.MaxMessageBytes-10], map[string]string{"k": "v"}); err != nil {
		t.Errorf("Send just under the limit: %v", err)
	}
	nothingElse := receive(t, q, 1, 3*time.Second)
	if len(nothingElse) != 1 || len(nothingElse[0].Body) != queue.MaxMessageBytes-10 {
		t.Errorf("after the refusals the queue holds %d messages, want only the one under the limit", len(nothingElse))
	}
}

// ReceiveBesideHuge sends a small message to q, where a message of huge
// bytes was written around Send, and receives: only the small one is
// handed out, and neither the receive nor then (if not nil: a listing of
// the DLQ, say) allocates a quarter of huge: the large body is never read
// into memory.
func ReceiveBesideHuge(t *testing.T, q queue.Queue, huge int, then func()) {
	t.Helper()
	if _, err := q.Send(t.Context(), []byte(`{"small":true}`), nil); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	msgs, err := q.Receive(t.Context(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if then != nil {
		then()
	}
	runtime.ReadMemStats(&after)
	if len(msgs) != 1 || string(msgs[0].Body) != `{"small":true}` {
		t.Fatalf("received %d messages, want only the small one", len(msgs))
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(huge/4) {
		t.Errorf("receiving (and what followed) allocated %d MiB: the %d MiB body was read", got>>20, huge>>20)
	}
}
