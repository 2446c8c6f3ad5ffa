package main

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/finedge/idempotent-consumer/internal/awstest"
)

// The harness on the emulator, small: every duplicate got the stored
// result without running the work, and each operation costs the floor
// (items under 1 KB): 2 WCU per fresh charge, 1 per duplicate, 3 per
// reclaim, no reads, in 2, 1 and 3 calls — the sparse index's writes
// counted (asked with ReturnConsumedCapacity=INDEXES, and by DynamoDB's
// rules, since moto bills no index): none on any of them. A fresh charge
// costs what Powertools' does.
func TestCapacityAtTheFloor(t *testing.T) {
	client := dynamodb.NewFromConfig(awstest.Config(t))
	row, err := measure(t.Context(), client, 4, 40, 5, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if row.WorkRuns != 40 {
		t.Fatalf("the work ran %d times for 40 keys", row.WorkRuns)
	}
	if row.RawPutPerS <= 0 || row.FreshOfFloor <= 0 || row.DupOfFloor <= 0 || row.RequestsPerDup != 1 {
		t.Fatalf("floor: raw %.0f/s, fresh %.2f and duplicates %.2f of it, %.1f requests per duplicate; want rates and 1 request",
			row.RawPutPerS, row.FreshOfFloor, row.DupOfFloor, row.RequestsPerDup)
	}
	c := row.Capacity
	want := Units{FreshWCU: 2, DupWCU: 1, ReclaimWCU: 3, CallsPerFresh: 2, CallsPerDup: 1, CallsPerReclaim: 3,
		FreshIndexWCU: 0, DupIndexWCU: 0, ReclaimIndexWCU: 0,
		ItemBytes: c.ItemBytes, ReportedFreshWCU: c.ReportedFreshWCU}
	if *c != want || c.ItemBytes > 1024 {
		t.Fatalf("capacity %+v, want %+v and an item under 1 KB", *c, want)
	}
	if total := c.FreshWCU + c.FreshIndexWCU + c.ReportedFreshIndexWCU; total != 2 {
		t.Fatalf("a fresh charge costs %g write units, table and index, want 2", total)
	}
}
