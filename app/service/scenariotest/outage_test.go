package scenariotest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/scenariotest"
)

// The outage check counts a receive by when its handling began: a charge
// received just before the window whose answer came just after it, and
// that is received again within the window, grew by one there.
func TestGrewDuringCountsAReceiveByWhenItsHandlingBegan(t *testing.T) {
	from := time.Date(2026, 12, 7, 19, 0, 0, 0, time.UTC)
	to := from.Add(time.Minute)
	at := func(d time.Duration) time.Time { return from.Add(d) }
	for _, tc := range []struct {
		name    string
		rs      []scenariotest.Receipt
		want    []scenariotest.Growth
		handled int
	}{
		{"received before, again within", []scenariotest.Receipt{{at(-20 * time.Millisecond), "m", 1}, {at(5 * time.Second), "m", 2}}, nil, 1},
		{"received twice within", []scenariotest.Receipt{{at(time.Millisecond), "m", 1}, {at(5 * time.Second), "m", 2}},
			[]scenariotest.Growth{{ID: "m", From: 0, To: 2}}, 1},
		{"handled from memory within", []scenariotest.Receipt{{at(time.Second), "m", 1}, {at(9 * time.Second), "m", 1}}, nil, 1},
		{"three receives across", []scenariotest.Receipt{{at(-time.Second), "m", 1}, {at(time.Second), "m", 2}, {at(2 * time.Second), "m", 3}},
			[]scenariotest.Growth{{ID: "m", From: 1, To: 3}}, 1},
		{"after the window", []scenariotest.Receipt{{at(time.Second), "m", 1}, {to, "m", 2}}, nil, 1},
		{"none within", []scenariotest.Receipt{{at(-time.Second), "m", 1}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, handled := scenariotest.GrewDuring(tc.rs, from, to)
			if !slices.Equal(got, tc.want) || handled != tc.handled {
				t.Fatalf("GrewDuring = %v, %d handled; want %v, %d", got, handled, tc.want, tc.handled)
			}
		})
	}
}
