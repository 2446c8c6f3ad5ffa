package awsdynamodb_test

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

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
			now := at.Add(time.Second)
			for _, c := range []struct {
				state  driver.State
				status string
				want   []string
			}{
				{driver.StateFailed, "DECLINED", []string{"CHG-F1"}},
				{driver.StateFailed, "BLOCKED", []string{"CHG-F2"}},
				{driver.StateFailed, "NONE", nil},
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
					c := k + "C"
					claim(c, "t1")
					mark(c)
					finish(c, "t1", driver.StateWaiting, "RETRY_SCHEDULED", whole)
					if _, err := s.Collect(ctx, driver.CollectRequest{Key: c, From: driver.StateWaiting, Token: "t1", Generation: 1,
						NewToken: "c1", PostedGeneration: 1, Status: "DEBITED", Now: now, ExpiresAt: exp}); err != nil {
						t.Fatalf("collect: %v", err)
					}
					expect("collect a waiting charge", c, nil...)
					e := k + "E"
					claim(e, "t1")
					mark(e)
					finish(e, "t1", driver.StateFailed, "DECLINED", whole)
					if _, err := s.Collect(ctx, driver.CollectRequest{Key: e, From: driver.StateFailed, Token: "t1", Generation: 1,
						NewToken: "c1", PostedGeneration: 1, Status: "DEBITED", Now: now, ExpiresAt: exp}); err != nil {
						t.Fatalf("collect: %v", err)
					}
					expect("collect a failed charge", e, nil...)
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
