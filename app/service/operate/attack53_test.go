package operate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
)

// RedriveAt holds back entries older than the retention less a day: the
// record that stops a second debit is gone when they come back. With a
// retention of a day or less that age was 0 or less — which the queue
// reads as no limit at all — so the console (whose --retention 24h is
// taken) redrove entries however old, and so did a proposal's run. An
// age limit of nothing holds back every entry, never none.
func TestAttack53MovedRedriveAtARetentionOfADayHoldsBackEverything(t *testing.T) {
	now := time.Now()
	for _, r := range []time.Duration{24 * time.Hour, time.Hour, 0, -time.Hour} {
		if o := operate.RedriveAt(now, r); o.MaxAge <= 0 {
			t.Errorf("RedriveAt(retention %s): MaxAge %s, which the queue reads as no limit", r, o.MaxAge)
		}
	}
	if o := operate.RedriveAt(now, 30*24*time.Hour); o.MaxAge != 29*24*time.Hour {
		t.Errorf("RedriveAt(30 days): MaxAge %s, want 29 days", o.MaxAge)
	}
	// The command line still says it: a usage error, nothing moved.
	rf := operate.RedriveFlags{Retention: 24 * time.Hour}
	var ue *cli.UsageError
	if err := rf.Settle(now); !errors.As(err, &ue) {
		t.Errorf("redrive --retention 24h: %v; want a usage error", err)
	}
}
