package operate

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

// An entry over the size limit is shown as one: its size, that it cannot
// be redriven, and the command that removes it, by its id.
func TestAnEntryOverTheSizeLimitIsShownWithItsSizeAndTheWayOut(t *testing.T) {
	const size = queue.MaxMessageBytes + 77
	e := queue.DLQEntry{ID: "4711", Reason: queue.TooLargeReason(size), TooLarge: true, Size: size, At: time.Now()}
	v := View(e, time.Now(), true)
	if v.Size != size || v.Code != string(queue.CodeTooLarge) || v.Body != "" {
		t.Fatalf("view %+v: want its size, code too_large and no body", v)
	}
	for _, want := range []string{strconv.Itoa(size) + " bytes", "cannot be redriven", "chargerecovery dlq purge 4711"} {
		if !strings.Contains(v.Unreadable, want) {
			t.Errorf("view says %q, want it to say %q", v.Unreadable, want)
		}
	}
}
