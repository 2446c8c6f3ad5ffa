package chargehandler_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/logbuf"
	"github.com/finedge/idempotent-consumer/internal/wiretest"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// neverDebits fails the test if a malformed message reaches the bank.
type neverDebits struct{ t *testing.T }

func (n neverDebits) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	n.t.Error("a malformed message was debited")
	return charge.DebitReceipt{}, charge.Permanent(nil)
}

// serve's path for a message whose fields are shifted (an account number
// in each field in turn): dead-lettered as invalid, the field named in the
// reason, and neither the DLQ entry's reason nor the log line holds the
// account number.
func TestShiftedFieldsNeverReachTheDLQReasonOrTheLog(t *testing.T) {
	const account = "445566778899"
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: neverDebits{t}, Notifier: notifysim.NewRecorder(0, quiet), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h := chargehandler.NewHandler(chargehandler.Options{Service: svc, Logger: log})
	q := memqueue.New(memqueue.Options{})
	for _, tt := range wiretest.Shifted(account) {
		t.Run(tt.Name, func(t *testing.T) {
			before := len(logs.String())
			if _, err := q.Send(t.Context(), []byte(tt.Body), nil); err != nil {
				t.Fatal(err)
			}
			ms, err := q.Receive(t.Context(), 1)
			if err != nil || len(ms) != 1 {
				t.Fatalf("receive: %v %d", err, len(ms))
			}
			dec := h.Handle(t.Context(), &consumer.Delivery{Message: ms[0]})
			if dec.Action != consumer.DeadLetter || dec.Reason.Code != chargehandler.Code(charge.Invalid) {
				t.Fatalf("decision %+v, want dead-lettered invalid", dec)
			}
			if err := q.DeadLetter(t.Context(), ms[0], dec.Reason); err != nil {
				t.Fatal(err)
			}
			dead, err := q.DLQ().Receive(t.Context(), 1)
			if err != nil || len(dead) != 1 {
				t.Fatalf("DLQ receive: %v %d", err, len(dead))
			}
			if err := q.DLQ().Ack(t.Context(), dead); err != nil {
				t.Fatal(err)
			}
			reason := queue.ReasonFromAttributes(dead[0].Attributes).String()
			line := logs.String()[before:]
			if tt.Field != "" && (!strings.Contains(reason, tt.Field) || !strings.Contains(line, tt.Field)) {
				t.Errorf("the field %s is not named: DLQ reason %q, log %s", tt.Field, reason, line)
			}
			if f := wiretest.Leaks(reason, account); f != "" {
				t.Errorf("the DLQ reason holds the account (%s): %q", f, reason)
			}
			if f := wiretest.Leaks(line, account); f != "" {
				t.Errorf("the log line holds the account (%s): %s", f, line)
			}
		})
	}
}
