package awsdynamodb_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

// billed is the client, asking for every write's consumed capacity with
// ReturnConsumedCapacity=INDEXES and counting, per write that succeeded:
// the table and index units the server reported, and the units DynamoDB's
// rules give from the item before and after it (read around the write by
// uncounted consistent GetItems: the test's writes are one at a time), and
// any write that puts listState on an item.
type billed struct {
	*dynamodb.Client
	table string

	mu                          sync.Mutex
	reportedTable, reportedGSIs float64
	tableUnits, indexUnits      int
	writes                      int
	setsListState               []string
}

type billedUnits struct {
	reportedTable, reportedGSIs float64
	tableUnits, indexUnits      int
	writes                      int
	setsListState               []string
}

func (b *billed) take() billedUnits {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := billedUnits{b.reportedTable, b.reportedGSIs, b.tableUnits, b.indexUnits, b.writes, b.setsListState}
	b.reportedTable, b.reportedGSIs, b.tableUnits, b.indexUnits, b.writes, b.setsListState = 0, 0, 0, 0, 0, nil
	return u
}

func (b *billed) item(ctx context.Context, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	out, err := b.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(b.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		panic(err)
	}
	return out.Item
}

func (b *billed) count(op string, before, after map[string]types.AttributeValue, cc *types.ConsumedCapacity, sets bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes++
	b.tableUnits += awsdynamodb.WriteUnits(max(awsdynamodb.ItemSize(before), awsdynamodb.ItemSize(after)))
	b.indexUnits += awsdynamodb.IndexWriteUnits(before, after)
	if cc != nil {
		switch {
		case cc.Table != nil && cc.Table.CapacityUnits != nil:
			b.reportedTable += *cc.Table.CapacityUnits
		case cc.CapacityUnits != nil:
			b.reportedTable += *cc.CapacityUnits
		}
		for _, g := range cc.GlobalSecondaryIndexes {
			if g.CapacityUnits != nil {
				b.reportedGSIs += *g.CapacityUnits
			}
		}
	}
	if sets {
		b.setsListState = append(b.setsListState, op)
	}
}

// setsListState: the update expression's SET clause names listState.
func setsListState(expr string, names map[string]string) bool {
	set, _, _ := strings.Cut(expr, " REMOVE ")
	for ph, name := range names {
		if name == "listState" && strings.Contains(set, ph+" =") {
			return true
		}
	}
	return strings.Contains(set, "listState =")
}

func (b *billed) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	key := map[string]types.AttributeValue{"pk": in.Item["pk"]}
	before := b.item(ctx, key)
	c := *in
	c.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
	out, err := b.Client.PutItem(ctx, &c, opts...)
	if err == nil {
		_, sets := in.Item["listState"]
		b.count("PutItem", before, b.item(ctx, key), out.ConsumedCapacity, sets)
	}
	return out, err
}

func (b *billed) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	before := b.item(ctx, in.Key)
	c := *in
	c.ReturnConsumedCapacity = types.ReturnConsumedCapacityIndexes
	out, err := b.Client.UpdateItem(ctx, &c, opts...)
	if err == nil {
		b.count("UpdateItem", before, b.item(ctx, in.Key), out.ConsumedCapacity, setsListState(aws.ToString(in.UpdateExpression), in.ExpressionAttributeNames))
	}
	return out, err
}

// A fresh charge costs what Powertools' does: 2 write units, the index's
// counted. Its claim and its DONE write no listState, so the sparse index
// is not written (DynamoDB bills an index only for an item in it before
// or after the write). Asked with ReturnConsumedCapacity=INDEXES, on moto
// and on dynalite: both report the table's units (moto a constant 1 a
// write) and neither bills an index, so the index units are also counted
// from the items by DynamoDB's rules (IndexWriteUnits). Then what leaves
// the hot path: a reclaim and its DONE write no index either; a wait, its
// resume and its DONE write it twice (in, out); a record an older version
// indexed as IN_PROGRESS leaves the index with its DONE.
func TestAFreshChargeCostsTwoWriteUnitsIndexesIncluded(t *testing.T) {
	for _, db := range awstest.DynamoDBs() {
		t.Run(db.Name, func(t *testing.T) {
			s0, client := storeOn(t, db, nil, "capacity")
			api := &billed{Client: client, table: s0.Table()}
			s := storeThrough(t, api, s0.Table())
			ctx := t.Context()
			clock := storetest.NewClock(storetest.Epoch)
			g := guardOn(t, s, clock)
			debit := func(context.Context, idempotency.Run) (idempotency.Done, error) {
				return idempotency.Done{Status: "DEBITED", Detail: "CBS0000000001"}, nil
			}
			check := func(what string, u billedUnits, writes, table, index int) {
				t.Helper()
				if u.writes != writes || u.tableUnits != table || u.indexUnits != index {
					t.Errorf("%s: %d writes, %d table and %d index write units; want %d, %d and %d", what, u.writes, u.tableUnits, u.indexUnits, writes, table, index)
				}
				if u.reportedGSIs != 0 {
					t.Errorf("%s: the server reported %.1f index units", what, u.reportedGSIs)
				}
			}

			res, err := g.Do(ctx, "CHG-FRESH", "fp", debit, idempotency.DoOptions{})
			if err != nil || res.Outcome != idempotency.Acquired {
				t.Fatalf("Do = %+v %v", res, err)
			}
			u := api.take()
			check("a fresh charge", u, 2, 2, 0)
			if u.reportedTable != 2 {
				t.Errorf("a fresh charge: the server reported %.1f table units, want 2", u.reportedTable)
			}
			if len(u.setsListState) > 0 {
				t.Errorf("a fresh charge's %v put listState on the item: the hot path must not write the index", u.setsListState)
			}
			if got := indexKeys(t, client, s.Table()); len(got) != 0 {
				t.Errorf("the index holds %v after a fresh charge", got)
			}

			// A claim while it runs is not in the index either; a finish
			// without the claimed record (an UpdateItem) removes the
			// listState it never had: no index write.
			c, err := g.Claim(ctx, "CHG-INPLACE", "fp")
			if err != nil {
				t.Fatal(err)
			}
			if got := indexKeys(t, client, s.Table()); len(got) != 0 {
				t.Errorf("the index holds %v while a fresh claim runs", got)
			}
			if err := s.Finish(ctx, driver.FinishRequest{Key: "CHG-INPLACE", Token: c.Record.Token, State: driver.StateDone, Status: "DEBITED",
				Now: clock.Now(), ExpiresAt: clock.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			check("a claim and a finish in place", api.take(), 2, 2, 0)

			// A reclaim (its worker died) and its DONE.
			if _, err := g.Claim(ctx, "CHG-DEAD", "fp"); err != nil {
				t.Fatal(err)
			}
			api.take()
			clock.Advance(2 * time.Minute)
			if res, err := g.Do(ctx, "CHG-DEAD", "fp", debit, idempotency.DoOptions{}); err != nil || res.Outcome != idempotency.Reclaimed {
				t.Fatalf("reclaim: %+v %v", res, err)
			}
			check("a reclaim and its DONE", api.take(), 2, 2, 0)

			// A wait: WAITING enters the index, its resume leaves it.
			runs := 0
			wait := func(context.Context, idempotency.Run) (idempotency.Done, error) {
				if runs++; runs == 1 {
					return idempotency.Done{}, &idempotency.Wait{Until: clock.Now().Add(time.Hour), Status: "RETRY_SCHEDULED"}
				}
				return idempotency.Done{Status: "DEBITED"}, nil
			}
			if res, err := g.Do(ctx, "CHG-WAIT", "fp", wait, idempotency.DoOptions{}); err != nil || res.Outcome != idempotency.Waiting {
				t.Fatalf("wait: %+v %v", res, err)
			}
			check("a claim and its wait", api.take(), 2, 2, 1)
			clock.Advance(2 * time.Hour)
			if res, err := g.Do(ctx, "CHG-WAIT", "fp", wait, idempotency.DoOptions{}); err != nil || res.Outcome != idempotency.Acquired {
				t.Fatalf("resume: %+v %v", res, err)
			}
			check("a resume and its DONE", api.take(), 2, 2, 1)

			// A record an older version wrote: listState IN_PROGRESS. Its
			// DONE takes it out of the index.
			c, err = g.Claim(ctx, "CHG-OLD", "fp")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.Table()),
				Key:              map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "CHG-OLD"}},
				UpdateExpression: aws.String("SET listState = :ip"), ExpressionAttributeValues: map[string]types.AttributeValue{
					":ip": &types.AttributeValueMemberS{Value: "IN_PROGRESS"}}}); err != nil {
				t.Fatal(err)
			}
			api.take()
			if err := g.Complete(ctx, c.Lease(), "DEBITED", "ref"); err != nil {
				t.Fatal(err)
			}
			check("an older version's claim's DONE", api.take(), 1, 1, 1)
			if got := indexKeys(t, client, s.Table()); len(got) != 0 {
				t.Errorf("the index holds %v, want nothing: every charge is DONE DEBITED", got)
			}
		})
	}
}
