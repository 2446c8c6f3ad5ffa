package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

func TestCheckWaitWithinQueue(t *testing.T) {
	const h = time.Hour
	step := 11*h + 40*time.Minute
	for _, tc := range []struct {
		name        string
		waits       []time.Duration
		retention   time.Duration
		maxReceives int
		resetsAge   bool
		bad         string // a word of the error; "" for none
	}{
		{"no wait", nil, 96 * h, 10, false, ""},
		{"72h×3 with jitter keeps its age past 96h", []time.Duration{79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second}, 96 * h, 10, false, "delete it by age"},
		{"72h×3 within a 14-day retention spends 22 receives", []time.Duration{79 * h, 79 * h, 79 * h}, 14 * 24 * h, 10, false, "22 receives"},
		{"72h×3 fits 14 days and 30 receives", []time.Duration{79 * h, 79 * h, 79 * h}, 14 * 24 * h, 30, false, ""},
		{"12h×2 fits 96h and 10 receives", []time.Duration{13*h + 13*time.Minute, 13*h + 13*time.Minute}, 96 * h, 10, false, ""},
		{"just at the retention", []time.Duration{48 * h, 48 * h}, 96 * h, 0, false, "delete it by age"},
		{"no redrive policy: no receive limit", []time.Duration{90 * h}, 96 * h, 0, false, ""},
		{"exactly the receives", []time.Duration{9 * step}, 14 * 24 * h, 10, false, ""},
		{"one receive over", []time.Duration{9*step + time.Second}, 14 * 24 * h, 10, false, "11 receives"},
		{"a notice lead alone", []time.Duration{100 * h}, 96 * h, 10, false, "delete it by age"},
		{"serve starts the message over: 72h×3 on 96h", []time.Duration{79 * h, 79 * h, 79 * h}, 96 * h, 10, true, ""},
		{"serve: a hide longer than the retention", []time.Duration{79 * h}, 6 * h, 10, true, "deleted by age while hidden"},
		{"serve: a short wait on a short retention", []time.Duration{time.Hour}, 6 * h, 10, true, ""},
		{"serve: maxReceiveCount 1", []time.Duration{79 * h}, 96 * h, 1, true, "second receive"},
	} {
		err := queue.CheckWaitWithinQueue(tc.waits, tc.retention, tc.maxReceives, step, tc.resetsAge)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.bad)
		}
	}
}
