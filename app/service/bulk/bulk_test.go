package bulk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/bulk"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/queue"
)

func event(i int) string {
	return fmt.Sprintf(`{"chargeId":"CHG-%d","accountId":"001234567890","amount":{"minor":2500,"currency":"INR"},"chargeType":"SMS_ALERT_FEE","dueDate":"2026-11-30"}`, i)
}

func TestGoodLinesAreSentInOrderAndBadOnesReportedByNumber(t *testing.T) {
	lines := []string{event(1), "", `{"chargeId":"CHG-2","amount":{"minor":25.5}}`, event(3), "not json", event(4) + "\r", strings.Repeat("x", bulk.MaxLine+1), event(5)}
	q := memqueue.New(memqueue.Options{})
	bad := map[int]string{}
	rep, err := bulk.Send(t.Context(), q, strings.NewReader(strings.Join(lines, "\n")), bulk.Options{BatchSize: 2,
		BadLine: func(n int, err error) { bad[n] = err.Error() }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 8 || rep.Sent != 4 || rep.Bad != 3 || rep.LastSentLine != 8 {
		t.Fatalf("report %+v, want 8 lines, 4 sent, 3 bad, last sent line 8", rep)
	}
	if !strings.Contains(bad[3], "invalid charge event") || bad[5] == "" || !strings.Contains(bad[7], "longer than") || len(bad) != 3 {
		t.Fatalf("bad lines %v", bad)
	}
	var ids []string
	for _, m := range q.Messages() {
		c, err := charge.ParseEvent(m.Body)
		if err != nil {
			t.Fatalf("a sent body does not parse: %v", err)
		}
		ids = append(ids, c.ID)
	}
	if strings.Join(ids, ",") != "CHG-1,CHG-3,CHG-4,CHG-5" {
		t.Fatalf("sent %v", ids)
	}
}

func TestRawSendsLinesUnchecked(t *testing.T) {
	q := memqueue.New(memqueue.Options{})
	rep, err := bulk.Send(t.Context(), q, strings.NewReader("not json\n{\"x\":1}\n"), bulk.Options{Raw: true})
	if err != nil || rep.Sent != 2 || rep.Bad != 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	if got := string(q.Messages()[0].Body); got != "not json" {
		t.Fatalf("sent %q", got)
	}
}

// failingQueue accepts n messages, then fails.
type failingQueue struct {
	queue.Queue
	n int
}

func (f *failingQueue) SendBatch(ctx context.Context, msgs []queue.Outgoing) (int, error) {
	take := min(len(msgs), f.n)
	f.n -= take
	if take < len(msgs) {
		return take, errors.New("queue unavailable")
	}
	return take, nil
}

func TestAnInterruptedRunSaysHowFarItGot(t *testing.T) {
	var in strings.Builder
	for i := range 30 {
		in.WriteString(event(i) + "\n")
	}
	rep, err := bulk.Send(t.Context(), &failingQueue{n: 13}, strings.NewReader(in.String()), bulk.Options{BatchSize: 10})
	if err == nil || rep.Sent != 13 || rep.LastSentLine != 13 {
		t.Fatalf("%+v %v, want an error after 13 sent, last line 13", rep, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err = bulk.Send(ctx, memqueue.New(memqueue.Options{}), strings.NewReader(in.String()), bulk.Options{})
	if !errors.Is(err, context.Canceled) || rep.Sent != 0 {
		t.Fatalf("%+v %v", rep, err)
	}

}
