package awsdynamodb_test

import (
	"slices"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

// Every listing an operator's page runs (stuck, status, the console's
// lists by state, prefix and page) is a request that DynamoDB accepts: run
// on moto and on dynalite, which refuses what DynamoDB refuses (a filter on
// the index's key attributes, for one: moto took the stuck listing's
// filter on pk, dynalite and DynamoDB answer ValidationException). FAILED,
// WAITING and DONE with a missed notice are Queries of the index; a claim
// is never in the index (the hot path writes none), so the stuck claims,
// the IN_PROGRESS listing and its count are a Scan of the table, and find
// the claims the index does not hold. An internal key's claim is never
// listed as stuck.
func TestListingsAreQueriesDynamoDBAccepts(t *testing.T) {
	for _, db := range awstest.DynamoDBs() {
		t.Run(db.Name, func(t *testing.T) {
			s0, client := storeOn(t, db, nil, "listing")
			api := &noScans{Client: client}
			s, err := awsdynamodb.New(api, s0.Table())
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			exp := at.Add(24 * time.Hour)
			claim := func(key string, lease time.Duration) string {
				t.Helper()
				tok := "tok-" + key
				r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Fingerprint: "fp", Now: at, LeaseExpiredBy: at,
					LeaseUntil: at.Add(lease), ExpiresAt: exp})
				if err != nil || !r.Acquired {
					t.Fatalf("claim %s: %+v %v", key, r, err)
				}
				return tok
			}
			finish := func(key string, state driver.State, status string) {
				t.Helper()
				req := driver.FinishRequest{Key: key, Token: claim(key, time.Minute), State: state, Status: status, Now: at, ExpiresAt: exp}
				if state == driver.StateWaiting {
					req.NotBefore = at.Add(time.Hour)
				}
				if err := s.Finish(ctx, req); err != nil {
					t.Fatalf("finish %s: %v", key, err)
				}
			}
			claim("CHG-S2", 2*time.Second)
			claim("CHG-S1", time.Second)
			claim("CHG-LIVE", time.Hour)
			claim(driver.InternalKeyPrefix+"lock", time.Second) // an internal key's lease: never stuck
			finish("CHG-W1", driver.StateWaiting, "RETRY_SCHEDULED")
			finish("CHG-W2", driver.StateWaiting, "WINDOW_CLOSED")
			finish("CHG-W3", driver.StateWaiting, "RETRY_SCHEDULED")
			finish("XYZ-W4", driver.StateWaiting, "RETRY_SCHEDULED")
			finish("CHG-F1", driver.StateFailed, "DECLINED")
			finish("CHG-N1", driver.StateDone, awsdynamodb.ListedResult)
			now := at.Add(time.Minute)
			for k, ls := range indexKeys(t, client, s.Table()) {
				if ls == "IN_PROGRESS" {
					t.Fatalf("the index holds the claim %s: the hot path must write no index", k)
				}
			}

			stuck, n, err := s.Stuck(ctx, now, 1)
			if err != nil || n != 2 || len(stuck) != 1 || stuck[0].Key != "CHG-S1" {
				t.Fatalf("Stuck(limit 1) = %v %d %v, want [CHG-S1] of 2 (oldest lease first, no internal key)", keys(stuck), n, err)
			}
			if stuck, n, err = s.Stuck(ctx, now, 10); err != nil || n != 2 || !slices.Equal(keys(stuck), []string{"CHG-S1", "CHG-S2"}) {
				t.Fatalf("Stuck = %v %d %v, want [CHG-S1 CHG-S2]", keys(stuck), n, err)
			}

			list := func(req driver.ListRequest) []string {
				t.Helper()
				req.Now = now
				var all []string
				for range 10 {
					page, err := s.ListState(ctx, req)
					if err != nil {
						t.Fatalf("ListState(%+v): %v", req, err)
					}
					all = append(all, keys(page.Records)...)
					if page.Next == "" {
						return all
					}
					req.After = page.Next
				}
				t.Fatalf("ListState(%+v): more than 10 pages", req)
				return nil
			}
			for _, c := range []struct {
				req  driver.ListRequest
				want []string
			}{
				{driver.ListRequest{State: driver.StateWaiting, Limit: 10}, []string{"CHG-W1", "CHG-W2", "CHG-W3", "XYZ-W4"}},
				{driver.ListRequest{State: driver.StateWaiting, Limit: 1}, []string{"CHG-W1", "CHG-W2", "CHG-W3", "XYZ-W4"}},
				{driver.ListRequest{State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Limit: 1}, []string{"CHG-W1", "CHG-W3", "XYZ-W4"}},
				{driver.ListRequest{State: driver.StateWaiting, Prefix: "CHG-", Limit: 2}, []string{"CHG-W1", "CHG-W2", "CHG-W3"}},
				{driver.ListRequest{State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Prefix: "CHG-", Limit: 1}, []string{"CHG-W1", "CHG-W3"}},
				{driver.ListRequest{State: driver.StateWaiting, Prefix: "CHG-", After: "CHG-W1", Limit: 10}, []string{"CHG-W2", "CHG-W3"}},
				{driver.ListRequest{State: driver.StateInProgress, Prefix: "CHG-", Limit: 10}, []string{"CHG-LIVE", "CHG-S1", "CHG-S2"}},
				{driver.ListRequest{State: driver.StateInProgress, Prefix: "CHG-", Limit: 1}, []string{"CHG-LIVE", "CHG-S1", "CHG-S2"}},
				{driver.ListRequest{State: driver.StateInProgress, Prefix: "CHG-", After: "CHG-LIVE", Limit: 10}, []string{"CHG-S1", "CHG-S2"}},
				{driver.ListRequest{State: driver.StateInProgress, Limit: 10}, []string{"CHG-LIVE", "CHG-S1", "CHG-S2", driver.InternalKeyPrefix + "lock"}},
				{driver.ListRequest{State: driver.StateFailed, Status: "DECLINED", Limit: 10}, []string{"CHG-F1"}},
				{driver.ListRequest{State: driver.StateDone, Status: awsdynamodb.ListedResult, Limit: 10}, []string{"CHG-N1"}},
			} {
				if got := list(c.req); !slices.Equal(got, c.want) {
					t.Errorf("ListState(%+v) = %v, want %v", c.req, got, c.want)
				}
			}

			counts, err := s.CountByState(ctx, now)
			if err != nil || counts[driver.StateWaiting] != 4 || counts[driver.StateFailed] != 1 || counts[driver.StateInProgress] != 4 {
				t.Fatalf("CountByState = %v %v, want WAITING 4, FAILED 1, IN_PROGRESS 4", counts, err)
			}
			if recs, err := s.ListByResult(ctx, driver.StateDone, awsdynamodb.ListedResult, now, 10); err != nil || !slices.Equal(keys(recs), []string{"CHG-N1"}) {
				t.Fatalf("ListByResult = %v %v, want [CHG-N1]", keys(recs), err)
			}
			if got := api.scans.Load(); got != 0 {
				t.Fatalf("%d Scan(s): the listings of the index's states must be Queries", got)
			}
			if api.inProgress.Load() == 0 {
				t.Fatal("no Scan of IN_PROGRESS: the index holds no claim, Stuck must scan")
			}
		})
	}
}
