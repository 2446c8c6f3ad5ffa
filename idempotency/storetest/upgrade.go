package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// UpgradeRecords are what a store's upgrade test writes, at, into a schema
// from before WAITING: a record in progress, a DONE one, and a FAILED one
// reopened into a second generation.
func UpgradeRecords(at time.Time) []driver.Record {
	return []driver.Record{
		{Key: "in-progress", State: driver.StateInProgress, Token: "t1", Fingerprint: "f1", Attempt: 2, LeaseUntil: at.Add(time.Minute),
			CreatedAt: at, UpdatedAt: at.Add(time.Second), ExpiresAt: at.Add(72 * time.Hour), Generation: 1},
		{Key: "done", State: driver.StateDone, Token: "t2", Fingerprint: "f2", Attempt: 1, LeaseUntil: at, CreatedAt: at, UpdatedAt: at,
			ExpiresAt: at.Add(72 * time.Hour), Status: "DEBITED", Detail: "CBS-1", Generation: 1},
		{Key: "reopened", State: driver.StateFailed, Token: "t3", Fingerprint: "f3", Attempt: 3, LeaseUntil: at, CreatedAt: at,
			UpdatedAt: at.Add(time.Hour), ExpiresAt: at.Add(72 * time.Hour), Status: "FAILED", Detail: "declined",
			Reopens: 1, ReopenedAt: at.Add(30 * time.Minute), ReopenReason: "INC-1", PrevStatus: "FAILED", PrevDetail: "timeout",
			Generation: 2, History: []string{"generation 1: timeout", "generation 2: declined"}},
	}
}

// Upgraded checks s, opened over the UpgradeRecords(at) rows written
// before WAITING: the upgrade's notes count the records kept without a
// summary, every record reads as it was written, and the in-progress one
// (its lease passed) waits and is resumed.
func Upgraded(t *testing.T, s driver.Store, notes []string, rows []driver.Record, at time.Time) {
	t.Helper()
	ctx := t.Context()
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "3 record(s) kept before summaries carry none") {
		t.Errorf("the upgrade's notes = %q, want the 3 records without a summary counted", notes)
	}
	for _, want := range rows {
		got, err := s.Get(ctx, want.Key, at)
		if err != nil {
			t.Fatalf("Get(%s) after the upgrade: %v", want.Key, err)
		}
		if !sameRecord(got, want) {
			t.Errorf("%s after the upgrade:\n got %+v\nwant %+v", want.Key, got, want)
		}
	}
	now := at.Add(2 * time.Minute)
	if err := s.Finish(ctx, driver.FinishRequest{Key: "in-progress", Token: "t1", State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
		Now: now, ExpiresAt: now.Add(72 * time.Hour), NotBefore: now.Add(time.Hour)}); err != nil {
		t.Fatalf("a wait after the upgrade: %v", err)
	}
	later := now.Add(time.Hour)
	res, err := s.Claim(ctx, driver.ClaimRequest{Key: "in-progress", Token: "t4", Fingerprint: "f1", Now: later, LeaseExpiredBy: later,
		LeaseUntil: later.Add(time.Minute), ExpiresAt: later.Add(72 * time.Hour)})
	if err != nil || !res.Acquired || res.Reclaimed || res.Record.Attempt != 3 {
		t.Fatalf("resume after the upgrade: %+v %v, want acquired, not reclaimed, attempt 3", res, err)
	}
}

func sameRecord(a, b driver.Record) bool {
	return a.Key == b.Key && a.State == b.State && a.Token == b.Token && a.Fingerprint == b.Fingerprint && a.Attempt == b.Attempt &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.Status == b.Status && a.Detail == b.Detail && a.Reopens == b.Reopens && a.ReopenedAt.Equal(b.ReopenedAt) &&
		a.ReopenReason == b.ReopenReason && a.PrevStatus == b.PrevStatus && a.PrevDetail == b.PrevDetail &&
		a.Generation == b.Generation && slices.Equal(a.History, b.History)
}
