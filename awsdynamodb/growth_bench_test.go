package awsdynamodb_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

// BenchmarkGrowth measures the claim on a table that already holds many
// records (performance round 4: growth on every backend), against a nearly
// empty one, in the same run — sqlite's BenchmarkGrowth on DynamoDB (here
// the emulator: it measures moto's cost as its table grows, not DynamoDB's,
// whose latency does not depend on the table's size):
//
//	IC_GROWTH_RECORDS=100000 IC_GROWTH_ROUNDS=3 scripts/with-moto.sh \
//	  go test -run XXX -bench Growth -benchtime 2000x -timeout 2h ./awsdynamodb
//
// IC_GROWTH_RECORDS is the big size, or several, comma-separated (default
// 100,000); 10,000 always runs first, as the reference. Each size has a
// table of its own, filled by BatchWriteItem (25 items a call, four calls
// at a time) with DONE items in the store's layout (the package comment's).
// The emulator keeps everything in one process's memory and answers one
// request at a time: a million records take a long while to write (the
// log says how long each size took). IC_GROWTH_ROUNDS runs the sizes in
// turn that many times, so each size's median comes from rounds
// interleaved in one run. Existing keys are charge-like ids in order. It
// reports claims/s (fresh claim + DONE, 16 at a time, new keys) and
// duplicate claims/s on existing keys drawn at random over the table.
func BenchmarkGrowth(b *testing.B) {
	client := dynamodb.NewFromConfig(awstest.Config(b))
	var tables []storetest.GrowthTable
	for _, n := range storetest.GrowthSizes(b, "100000") {
		name := awstest.Name("growth")
		if err := awsdynamodb.CreateTable(b.Context(), client, name); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), client, name) })
		prefillDynamo(b, client, name, n)
		s, err := awsdynamodb.New(client, name)
		if err != nil {
			b.Fatal(err)
		}
		tables = append(tables, storetest.GrowthTable{N: n, Store: s})
	}
	storetest.Growth(b, tables)
}

// prefillDynamo writes n DONE items to table in the store's layout (pk,
// state, token, fingerprint, attempt, leaseUntil, createdAt, updatedAt,
// expiresAt in Unix ms, status, detail, ttl in Unix seconds; no listState:
// a DONE record is not in the index).
func prefillDynamo(b *testing.B, c *dynamodb.Client, table string, n int) {
	b.Helper()
	ctx := b.Context()
	start := time.Now()
	now := time.Now()
	expires := now.Add(14 * 24 * time.Hour)
	nowMS := &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}
	expMS := &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.UnixMilli(), 10)}
	ttl := &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Unix(), 10)}
	fp := &types.AttributeValueMemberS{Value: storetest.GrowthFingerprint}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	slots := make(chan struct{}, 4)
	for from := 0; from < n && failed.Load() == nil; from += 25 {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			var reqs []types.WriteRequest
			for i := from; i < min(from+25, n); i++ {
				reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
					"pk": s(storetest.GrowthKey(i)), "state": s("DONE"), "token": s(fmt.Sprintf("%032x", i)), "fingerprint": fp,
					"attempt": &types.AttributeValueMemberN{Value: "1"}, "leaseUntil": nowMS, "createdAt": nowMS, "updatedAt": nowMS,
					"expiresAt": expMS, "status": s("DEBITED"), "detail": s(fmt.Sprintf("CBS%010d", i)), "ttl": ttl,
				}}})
			}
			for len(reqs) > 0 {
				out, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				reqs = out.UnprocessedItems[table]
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	var count int64
	if out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}); err == nil && out.Table.ItemCount != nil {
		count = *out.Table.ItemCount
	}
	b.Logf("built %d records in table %s in %s (the table reports %d items)", n, table, time.Since(start).Round(time.Second), count)
}
