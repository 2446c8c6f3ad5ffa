package chargehandler_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/chargehandler"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/queue"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The exactly-once scenarios over every backend are in
// service/scenariotest; this file checks the one decision table.

// The design's outcome → ack table, written out as the specification the
// code's table must match. The test walks the outcomes the charge package
// names (numbered from 1), so a new outcome without a decision here fails.
func TestEveryOutcomeHasTheDesignsAction(t *testing.T) {
	spec := map[charge.Outcome]consumer.Action{
		charge.Processed: consumer.Ack, charge.DuplicateDone: consumer.Ack,
		charge.DebitFailed: consumer.DeadLetter, charge.DuplicateFailed: consumer.DeadLetter,
		charge.Conflict: consumer.DeadLetter, charge.Invalid: consumer.DeadLetter,
		charge.RetryLater: consumer.Retry, charge.DuplicateInProgress: consumer.Retry, charge.LeaseLost: consumer.Retry,
	}
	named := 0
	for o := charge.Outcome(1); !strings.HasPrefix(o.String(), "outcome("); o++ {
		named++
		want, ok := spec[o]
		if !ok {
			t.Errorf("outcome %v is not in the design's table: decide its ack behaviour and add it", o)
			continue
		}
		if got, ok := chargehandler.Actions[o]; !ok || got != want {
			t.Errorf("Actions[%v] = %v, want %v", o, got, want)
		}
		dec := chargehandler.Decide(charge.Result{Outcome: o, Reason: "why"}, time.Second)
		if dec.Action != want {
			t.Errorf("Decide(%v) = %v, want %v", o, dec.Action, want)
		}
		if want != consumer.Ack && (dec.Reason.Code != queue.Code(o.String()) || dec.Reason.Detail != "why") {
			t.Errorf("Decide(%v) reason %+v, want code %q and the detail", o, dec.Reason, o)
		}
	}
	if named != len(spec) || len(chargehandler.Actions) != len(spec) {
		t.Errorf("the code names %d outcomes and maps %d, the design has %d", named, len(chargehandler.Actions), len(spec))
	}
	if dec := chargehandler.Decide(charge.Result{Outcome: charge.Outcome(99)}, time.Second); dec.Action != consumer.Retry {
		t.Errorf("an unknown outcome is %v, want retry (never acked)", dec.Action)
	}
}

func TestALiveLeaseComesBackJustAfterItCouldExpire(t *testing.T) {
	dec := chargehandler.Decide(charge.Result{Outcome: charge.DuplicateInProgress, RetryAfter: 4 * time.Second}, time.Second)
	if dec.Action != consumer.Retry || dec.RetryAfter != 5*time.Second {
		t.Fatalf("decision %+v, want retry after the lease's rest plus the margin (5s)", dec)
	}
	dec = chargehandler.Decide(charge.Result{Outcome: charge.RetryLater}, time.Second)
	if dec.RetryAfter != 0 {
		t.Fatalf("a plain transient failure waits %v, want the runtime's backoff (0 here)", dec.RetryAfter)
	}
}
