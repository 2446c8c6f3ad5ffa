package awsdynamodb_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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

// Review 52 (the hot path writes no index): attacks on the listings.

// ListByResult answers the records in a state with a status. For FAILED
// and WAITING it Queried the state's partition of the index without the
// status: ListByResult(FAILED, "DECLINED") listed every FAILED charge,
// whatever its status (an operator acting on "the declined charges" acted
// on the blocked ones too).
func TestAttack52DynamoListByResultKeepsToTheStatus(t *testing.T) {
	for _, db := range awstest.DynamoDBs() {
		t.Run(db.Name, func(t *testing.T) {
			s, _ := storeOn(t, db, nil, "a52result")
			ctx := t.Context()
			at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			exp := at.Add(24 * time.Hour)
			finish := func(key string, state driver.State, status string) {
				t.Helper()
				if r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-" + key, Fingerprint: "fp", Now: at, LeaseExpiredBy: at,
					LeaseUntil: at.Add(time.Minute), ExpiresAt: exp}); err != nil || !r.Acquired {
					t.Fatalf("claim %s: %+v %v", key, r, err)
				}
				req := driver.FinishRequest{Key: key, Token: "tok-" + key, State: state, Status: status, Now: at, ExpiresAt: exp}
				if state == driver.StateWaiting {
					req.NotBefore = at.Add(time.Hour)
				}
				if err := s.Finish(ctx, req); err != nil {
					t.Fatalf("finish %s: %v", key, err)
				}
			}
			finish("CHG-F1", driver.StateFailed, "DECLINED")
			finish("CHG-F2", driver.StateFailed, "BLOCKED")
			finish("CHG-W1", driver.StateWaiting, "RETRY_SCHEDULED")
			finish("CHG-W2", driver.StateWaiting, "WINDOW_CLOSED")
			finish("CHG-F3", driver.StateFailed, "") // no status: an empty string, which DynamoDB takes in a value
			now := at.Add(time.Second)
			for _, c := range []struct {
				state  driver.State
				status string
				want   []string
			}{
				{driver.StateFailed, "DECLINED", []string{"CHG-F1"}},
				{driver.StateFailed, "BLOCKED", []string{"CHG-F2"}},
				{driver.StateFailed, "NONE", nil},
				{driver.StateFailed, "", []string{"CHG-F3"}},
				{driver.StateWaiting, "RETRY_SCHEDULED", []string{"CHG-W1"}},
				{driver.StateWaiting, "WINDOW_CLOSED", []string{"CHG-W2"}},
			} {
				recs, err := s.ListByResult(ctx, c.state, c.status, now, 100)
				if err != nil {
					t.Fatal(err)
				}
				got := keys(recs)
				sort.Strings(got)
				if !slices.Equal(got, c.want) {
					t.Errorf("ListByResult(%s, %s) = %v, want %v", c.state, c.status, got, c.want)
				}
			}
			// A cursor on a key that is not (or no longer) in the listing:
			// the page goes on after it.
			page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Prefix: "CHG-", After: "CHG-F1x", Limit: 10, Now: now})
			if err != nil || !slices.Equal(keys(page.Records), []string{"CHG-F2", "CHG-F3"}) {
				t.Errorf("ListState(FAILED after CHG-F1x) = %v %v, want [CHG-F2 CHG-F3]", keys(page.Records), err)
			}
		})
	}
}

// Every row of the state table that moves a record, walked on one key
// each, and after each move every listing an operator has is asked where
// the record is: it must be listed in exactly the state it is in (stuck
// when its lease passed), never lost, never in its old listing. Records an
// older version wrote (listState = IN_PROGRESS) walk the same rows.
func TestAttack52DynamoEveryMoveIsListedWhereItIs(t *testing.T) {
	for _, db := range awstest.DynamoDBs() {
		t.Run(db.Name, func(t *testing.T) {
			s, client := storeOn(t, db, nil, "a52moves")
			ctx := t.Context()
			at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			exp := at.Add(24 * time.Hour)
			now := at
			// An older version's listState = IN_PROGRESS lingers on a
			// claim until its next write that changes state (IndexName:
			// documented, and nothing reads that partition).
			lingers := false
			where := func(key string) []string {
				t.Helper()
				var in []string
				for _, l := range []struct {
					name string
					req  driver.ListRequest
				}{
					{"IN_PROGRESS", driver.ListRequest{State: driver.StateInProgress}},
					{"WAITING", driver.ListRequest{State: driver.StateWaiting}},
					{"FAILED", driver.ListRequest{State: driver.StateFailed}},
					{awsdynamodb.ListedResult, driver.ListRequest{State: driver.StateDone, Status: awsdynamodb.ListedResult}},
				} {
					l.req.Prefix, l.req.Limit, l.req.Now = key, 10, now
					page, err := s.ListState(ctx, l.req)
					if err != nil {
						t.Fatalf("ListState(%s): %v", l.name, err)
					}
					if slices.Contains(keys(page.Records), key) {
						in = append(in, l.name)
					}
				}
				stuck, _, err := s.Stuck(ctx, now, 1000)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(keys(stuck), key) {
					in = append(in, "stuck")
				}
				if ls, ok := indexKeys(t, client, s.Table())[key]; ok && !(ls == "IN_PROGRESS" && lingers) {
					in = append(in, "index:"+ls)
				}
				return in
			}
			expect := func(step, key string, want ...string) {
				t.Helper()
				if got := where(key); !slices.Equal(got, want) {
					t.Errorf("%s: %s is listed in %v, want %v", step, key, got, want)
				}
			}
			rec := func(key string) driver.Record {
				t.Helper()
				r, err := s.Get(ctx, key, now)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			claim := func(key, tok string) driver.ClaimResult {
				t.Helper()
				r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Fingerprint: "fp", Now: now, LeaseExpiredBy: now,
					LeaseUntil: now.Add(time.Minute), ExpiresAt: exp})
				if err != nil || !r.Acquired {
					t.Fatalf("claim %s: %+v %v", key, r, err)
				}
				return r
			}
			finish := func(key, tok string, state driver.State, status string, whole bool) {
				t.Helper()
				req := driver.FinishRequest{Key: key, Token: tok, State: state, Status: status, Now: now, ExpiresAt: exp}
				if state == driver.StateWaiting {
					req.NotBefore = now.Add(time.Minute)
				}
				if whole {
					r := rec(key)
					req.Claimed = &r
				}
				if err := s.Finish(ctx, req); err != nil {
					t.Fatalf("finish %s: %v", key, err)
				}
			}
			older := func(key string) { // as an older version wrote it
				t.Helper()
				if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.Table()),
					Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
					UpdateExpression: aws.String("SET listState = :ip"), ExpressionAttributeValues: map[string]types.AttributeValue{
						":ip": &types.AttributeValueMemberS{Value: "IN_PROGRESS"}}}); err != nil {
					t.Fatal(err)
				}
			}
			advance := func(d time.Duration) { now = now.Add(d) }

			for _, whole := range []bool{true, false} {
				for _, old := range []bool{false, true} {
					k := "CHG-"
					if whole {
						k += "P"
					} else {
						k += "U"
					}
					if old {
						k += "O-"
					} else {
						k += "N-"
					}
					lingers = old
					mark := func(key string) {
						if old {
							older(key)
						}
					}
					// claim → IN_PROGRESS; lease passes → stuck; reclaim; extend.
					a := k + "A"
					claim(a, "t1")
					mark(a)
					expect("claim", a, "IN_PROGRESS")
					advance(2 * time.Minute)
					expect("lease passed", a, "IN_PROGRESS", "stuck")
					claim(a, "t2")
					expect("reclaim", a, "IN_PROGRESS")
					mark(a)
					if err := s.Extend(ctx, driver.ExtendRequest{Key: a, Token: "t2", LeaseUntil: now.Add(time.Minute), Now: now}); err != nil {
						t.Fatal(err)
					}
					expect("extend", a, "IN_PROGRESS")
					// finish WAITING → due → resume → FAILED → reopen → stuck → DONE listed → amend.
					finish(a, "t2", driver.StateWaiting, "RETRY_SCHEDULED", whole)
					expect("wait", a, "WAITING", "index:WAITING")
					advance(2 * time.Minute)
					expect("due", a, "WAITING", "index:WAITING")
					claim(a, "t3")
					expect("resume", a, "IN_PROGRESS")
					mark(a)
					finish(a, "t3", driver.StateFailed, "DECLINED", whole)
					expect("fail", a, "FAILED", "index:FAILED")
					advance(time.Second)
					r, err := s.Reopen(ctx, driver.ReopenRequest{Key: a, Token: "t4", Reason: "fixed", Now: now, LeaseUntil: now, ExpiresAt: exp,
						Generation: 2, History: []string{"g1 DECLINED"}})
					if err != nil {
						t.Fatalf("reopen: %v", err)
					}
					expect("reopen", a, "IN_PROGRESS", "stuck") // its lease is now: a reopened charge nobody runs is stuck at once
					advance(time.Second)
					mark(a)
					finish(a, r.Token, driver.StateDone, awsdynamodb.ListedResult, whole)
					expect("done, notice missed", a, awsdynamodb.ListedResult, "index:"+awsdynamodb.ListedResult)
					d := rec(a)
					if _, err := s.Amend(ctx, driver.AmendRequest{Key: a, Token: d.Token, FromStatus: d.Status, Status: "DEBITED", Now: now}); err != nil {
						t.Fatal(err)
					}
					expect("amend", a, nil...)

					// collect: from a stuck claim, from WAITING, from FAILED.
					b := k + "B"
					claim(b, "t1")
					mark(b)
					advance(2 * time.Minute)
					expect("stuck", b, "IN_PROGRESS", "stuck")
					if _, err := s.Collect(ctx, driver.CollectRequest{Key: b, From: driver.StateInProgress, Token: "t1", Generation: 1, LeaseExpiredBy: now,
						NewToken: "c1", PostedGeneration: 1, Status: awsdynamodb.ListedResult, Now: now, ExpiresAt: exp}); err != nil {
						t.Fatalf("collect: %v", err)
					}
					expect("collect a stuck claim", b, awsdynamodb.ListedResult, "index:"+awsdynamodb.ListedResult)
					c, e := k+"C", k+"E"
					for _, from := range []struct {
						key, what string
						state     driver.State
						status    string
					}{{c, "waiting", driver.StateWaiting, "RETRY_SCHEDULED"}, {e, "failed", driver.StateFailed, "DECLINED"}} {
						claim(from.key, "t1")
						mark(from.key)
						finish(from.key, "t1", from.state, from.status, whole)
						if _, err := s.Collect(ctx, driver.CollectRequest{Key: from.key, From: from.state, Token: "t1", Generation: 1,
							NewToken: "c1", PostedGeneration: 1, Status: "DEBITED", Now: now, ExpiresAt: exp}); err != nil {
							t.Fatalf("collect: %v", err)
						}
						expect("collect a "+from.what+" charge", from.key, nil...)
					}
					idx := indexKeys(t, client, s.Table())
					for _, key := range []string{a, b, c, e} {
						if ls, ok := idx[key]; ok && ls == "IN_PROGRESS" {
							t.Errorf("%s (DONE) is still indexed IN_PROGRESS: an older version's listState did not leave with its DONE", key)
						}
					}
				}
			}
		})
	}
}

// scanTampered is the client with every Scan page cut to a few items (so
// that most pages come back empty, the filter applied after the limit,
// and not done), and the caller's context cancelled after cancelAfter
// Scan requests (0: never).
type scanTampered struct {
	*dynamodb.Client
	limit       int32
	cancelAfter int32
	cancel      context.CancelFunc
	scans       atomic.Int32
}

func (s *scanTampered) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c := *in
	if s.limit > 0 {
		c.Limit = aws.Int32(s.limit)
	}
	if n := s.scans.Add(1); s.cancelAfter > 0 && n == s.cancelAfter {
		s.cancel()
	}
	return s.Client.Scan(ctx, &c, opts...)
}

// Stuck, the IN_PROGRESS count and listing over a table where the few
// stuck claims hide among many other records: pages cut to 3 items come
// back empty but not done, and every stuck claim is still found; a Scan
// whose context is cancelled half-way reports an error, never the part it
// counted as the whole.
func TestAttack52DynamoScanPagesEmptyButNotDoneAndCancelled(t *testing.T) {
	db := awstest.DynamoDBs()[1] // dynalite
	s0, client := storeOn(t, db, nil, "a52scan")
	ctx := t.Context()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	exp := at.Add(24 * time.Hour)
	const n = 120
	var wantStuck []string
	for i := range n {
		key := fmt.Sprintf("CHG-%04d", i)
		if r, err := s0.Claim(ctx, driver.ClaimRequest{Key: key, Token: "t", Fingerprint: "fp", Now: at, LeaseExpiredBy: at,
			LeaseUntil: at.Add(time.Minute), ExpiresAt: exp}); err != nil || !r.Acquired {
			t.Fatalf("claim %s: %+v %v", key, r, err)
		}
		if i%17 == 5 {
			wantStuck = append(wantStuck, key) // left running
			continue
		}
		if err := s0.Finish(ctx, driver.FinishRequest{Key: key, Token: "t", State: driver.StateDone, Status: "DEBITED", Now: at, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	now := at.Add(time.Hour)
	api := &scanTampered{Client: client, limit: 3}
	s, err := awsdynamodb.New(api, s0.Table())
	if err != nil {
		t.Fatal(err)
	}
	stuck, total, err := s.Stuck(ctx, now, 1000)
	got := keys(stuck)
	sort.Strings(got)
	if err != nil || total != len(wantStuck) || !slices.Equal(got, wantStuck) {
		t.Fatalf("Stuck over pages of 3 = %v of %d, %v; want %v", got, total, err, wantStuck)
	}
	if api.scans.Load() < n/3 {
		t.Fatalf("%d Scan requests: the pages were not cut", api.scans.Load())
	}
	counts, err := s.CountByState(ctx, now)
	if err != nil || counts[driver.StateInProgress] != len(wantStuck) {
		t.Fatalf("CountByState over pages of 3 = %v %v, want IN_PROGRESS %d", counts, err, len(wantStuck))
	}
	page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateInProgress, Limit: 2, Now: now})
	if err != nil || !slices.Equal(keys(page.Records), wantStuck[:2]) {
		t.Fatalf("ListState(IN_PROGRESS, 2) = %v %v, want %v", keys(page.Records), err, wantStuck[:2])
	}

	for _, after := range []int32{1, 5, 20} {
		cctx, cancel := context.WithCancel(ctx)
		api := &scanTampered{Client: client, limit: 3, cancelAfter: after, cancel: cancel}
		s, _ := awsdynamodb.New(api, s0.Table())
		if _, total, err := s.Stuck(cctx, now, 1000); err == nil {
			t.Errorf("Stuck cancelled after %d Scan requests answered %d stuck and no error", after, total)
		}
		if counts, err := s.CountByState(cctx, now); err == nil {
			t.Errorf("CountByState on a cancelled context answered %v and no error", counts)
		}
		cancel()
	}
}

// Setup adds the index to a table made before it and fills listState on
// the FAILED, WAITING and missed-notice records written before. A setup
// interrupted after its UpdateTable (the index still filling at its
// 30-minute deadline, whose error says "run setup again later", or a
// Ctrl-C) found the index there on the next run and never filled: the
// older FAILED charge stayed out of every listing and count. On moto
// (dynalite cannot add an index to an on-demand table).
func TestAttack52DynamoSetupAgainAfterAnInterruptedSetupFills(t *testing.T) {
	db := awstest.DynamoDBs()[0]
	client, table := tableBeforeTheIndex(t, db, "a52fill", "a52old")
	ctx := t.Context()
	s, err := awsdynamodb.New(client, table)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	exp := at.Add(24 * time.Hour)
	for _, k := range []struct {
		key   string
		state driver.State
	}{{"CHG-OLDF", driver.StateFailed}, {"CHG-OLDW", driver.StateWaiting}} {
		if r, err := s.Claim(ctx, driver.ClaimRequest{Key: k.key, Token: "t", Fingerprint: "fp", Now: at, LeaseExpiredBy: at,
			LeaseUntil: at.Add(time.Minute), ExpiresAt: exp}); err != nil || !r.Acquired {
			t.Fatalf("claim: %+v %v", r, err)
		}
		req := driver.FinishRequest{Key: k.key, Token: "t", State: k.state, Status: "DECLINED", Now: at, ExpiresAt: exp}
		if k.state == driver.StateWaiting {
			req.NotBefore = at.Add(time.Hour)
		}
		if err := s.Finish(ctx, req); err != nil {
			t.Fatal(err)
		}
		// An older version's record: no listState.
		if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: k.key}}, UpdateExpression: aws.String("REMOVE listState")}); err != nil {
			t.Fatal(err)
		}
	}
	// The interrupted setup got as far as its UpdateTable.
	if _, err := client.UpdateTable(ctx, &dynamodb.UpdateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("listState"), AttributeType: types.ScalarAttributeTypeS}},
		GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
			IndexName: aws.String(awsdynamodb.IndexName),
			KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("listState"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("pk"), KeyType: types.KeyTypeRange}},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := awsdynamodb.CreateTable(ctx, client, table); err != nil && !awstest.TTLUnsupported(err) { // setup again
		t.Fatal(err)
	}
	now := at.Add(time.Second)
	for _, st := range []driver.State{driver.StateFailed, driver.StateWaiting} {
		page, err := s.ListState(ctx, driver.ListRequest{State: st, Limit: 10, Now: now})
		if err != nil || len(page.Records) != 1 {
			t.Errorf("%s after setup ran again: %v %v, want the older record filled in", st, keys(page.Records), err)
		}
	}
	counts, err := s.CountByState(ctx, now)
	if err != nil || counts[driver.StateFailed] != 1 || counts[driver.StateWaiting] != 1 || counts[driver.StateInProgress] != 0 {
		t.Errorf("CountByState after setup ran again = %v %v, want FAILED 1, WAITING 1, IN_PROGRESS 0", counts, err)
	}
	// The fill's mark is nobody's record: no listing or count shows it.
	if stuck, n, err := s.Stuck(ctx, now.Add(48*time.Hour), 10); err != nil || n != 0 {
		t.Errorf("Stuck = %v %d %v", keys(stuck), n, err)
	}
}
