package awsdynamodb_test

import (
	"fmt"
	"slices"
	"sync"
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
			s := storeThrough(t, api, s0.Table())
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
			// IN_PROGRESS: CHG-LIVE, CHG-S1, CHG-S2; not the tool's own "_lock".
			if err != nil || counts[driver.StateWaiting] != 4 || counts[driver.StateFailed] != 1 || counts[driver.StateInProgress] != 3 {
				t.Fatalf("CountByState = %v %v, want WAITING 4, FAILED 1, IN_PROGRESS 3", counts, err)
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

// Stuck and the IN_PROGRESS listing over more claims than the Scan pages
// of its 4 segments hold (1,000 items each) and than they keep in memory
// (a page's worth): the total is every stuck claim, the list the oldest
// leases, the page the least keys. On dynalite.
func TestStuckOverManyClaims(t *testing.T) {
	db := awstest.DynamoDBs()[1]
	s0, client := storeOn(t, db, nil, "many")
	api := &noScans{Client: client}
	s := storeThrough(t, api, s0.Table())
	ctx := t.Context()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const n = 4800 // 4 segments of more than one page each
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			key := fmt.Sprintf("CHG-M%05d", i)
			// Leases end a millisecond apart, the highest key first.
			_, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok", Fingerprint: "fp", Now: at, LeaseExpiredBy: at,
				LeaseUntil: at.Add(time.Duration(n-i) * time.Millisecond), ExpiresAt: at.Add(24 * time.Hour)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	now := at.Add(time.Hour)
	stuck, total, err := s.Stuck(ctx, now, 3)
	if err != nil || total != n || !slices.Equal(keys(stuck), []string{"CHG-M04799", "CHG-M04798", "CHG-M04797"}) {
		t.Fatalf("Stuck(limit 3) = %v of %d, %v; want the 3 oldest leases of %d", keys(stuck), total, err, n)
	}
	if got := api.inProgress.Load(); got <= 4 {
		t.Fatalf("Stuck read the table in %d Scan requests, want more than one page a segment", got)
	}
	page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateInProgress, Prefix: "CHG-M", After: "CHG-M00100", Limit: 2, Now: now})
	if err != nil || !slices.Equal(keys(page.Records), []string{"CHG-M00101", "CHG-M00102"}) || page.Next != "CHG-M00102" {
		t.Fatalf("ListState(IN_PROGRESS after CHG-M00100, limit 2) = %v next %q, %v", keys(page.Records), page.Next, err)
	}
	counts, err := s.CountByState(ctx, now)
	if err != nil || counts[driver.StateInProgress] != n {
		t.Fatalf("CountByState = %v %v, want %d IN_PROGRESS", counts, err, n)
	}
}
