package awsdynamodb_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
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

// noScans is the client, counting the Scans that are not of IN_PROGRESS
// records (those are a Scan: the index does not hold them) and all of
// them.
type noScans struct {
	*dynamodb.Client
	scans      atomic.Int32 // Scans of anything but IN_PROGRESS
	inProgress atomic.Int32 // Scans of IN_PROGRESS
}

func (n *noScans) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	if strings.HasPrefix(aws.ToString(in.FilterExpression), "#state = :ip ") && in.ExpressionAttributeValues[":ip"].(*types.AttributeValueMemberS).Value == "IN_PROGRESS" {
		n.inProgress.Add(1)
	} else {
		n.scans.Add(1)
	}
	return n.Client.Scan(ctx, in, opts...)
}

// indexKeys is what the sparse index holds, read straight from it.
func indexKeys(t *testing.T, c *dynamodb.Client, table string) map[string]string {
	t.Helper()
	out, err := c.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(table), IndexName: aws.String(awsdynamodb.IndexName)})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, item := range out.Items {
		m[item["pk"].(*types.AttributeValueMemberS).Value] = item["listState"].(*types.AttributeValueMemberS).Value
	}
	return m
}

func guardOn(t *testing.T, s driver.Store, clock *storetest.Clock) *idempotency.Guard {
	t.Helper()
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, Clock: clock, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestTheSparseIndexHoldsOnlyTheStatesWorthListing(t *testing.T) {
	_, client := newStore(t)
	table := awstest.Name("sparse")
	if err := awsdynamodb.CreateTable(t.Context(), client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), client, table) })
	api := &noScans{Client: client}
	s := storeThrough(t, api, table)
	ctx := t.Context()
	clock := storetest.NewClock(storetest.Epoch)
	g := guardOn(t, s, clock)
	finish := func(key string, fail bool, status string) {
		c, err := g.Claim(ctx, key, "fp")
		if err != nil || c.Outcome != idempotency.Acquired {
			t.Fatalf("claim %s: %v %v", key, c.Outcome, err)
		}
		if fail {
			err = g.Fail(ctx, c.Lease(), "FAILED", "declined")
		} else {
			err = g.Complete(ctx, c.Lease(), status, "ref")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	finish("CHG-1", true, "")
	finish("CHG-2", true, "")
	finish("CHG-3", false, "DEBITED")
	finish("CHG-4", false, awsdynamodb.ListedResult)
	if _, err := g.Claim(ctx, "CHG-5", "fp"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"CHG-1": "FAILED", "CHG-2": "FAILED", "CHG-4": awsdynamodb.ListedResult}
	if got := indexKeys(t, client, table); !maps.Equal(got, want) {
		t.Fatalf("the index holds %v, want %v (a DONE DEBITED record is never in it, nor a claim: the hot path writes no index)", got, want)
	}
	counts, err := s.CountByState(ctx, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if counts[driver.StateFailed] != 2 || counts[driver.StateInProgress] != 1 {
		t.Fatalf("counts %v, want FAILED 2, IN_PROGRESS 1", counts)
	}
	if _, ok := counts[driver.StateDone]; ok {
		t.Fatalf("DONE counted (%v): it is not in the index, a count would be a Scan", counts)
	}
	// CHG-1 leaves FAILED (reopened): it leaves the FAILED listing.
	clock.Advance(time.Minute)
	if _, err := g.Reopen(ctx, "CHG-1", "fixed", idempotency.ReopenOptions{}); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Limit: 10, Now: clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(page.Records); !slices.Equal(got, []string{"CHG-2"}) {
		t.Fatalf("FAILED after a reopen: %v, want [CHG-2]", got)
	}
	if n, _ := s.CountByState(ctx, clock.Now()); n[driver.StateFailed] != 1 {
		t.Fatalf("FAILED count after a reopen: %v", n)
	}
	if _, ok := indexKeys(t, client, table)["CHG-1"]; ok {
		t.Fatal("a reopened record is still in the index")
	}
	// Reclaimed and debited, it stays out of the index.
	c, err := g.Claim(ctx, "CHG-1", "fp")
	if err != nil || !c.Outcome.Owned() {
		t.Fatalf("reclaim: %v %v", c.Outcome, err)
	}
	if err := g.Complete(ctx, c.Lease(), "DEBITED", "ref"); err != nil {
		t.Fatal(err)
	}
	if _, ok := indexKeys(t, client, table)["CHG-1"]; ok {
		t.Fatal("a DONE DEBITED record is still in the index")
	}
	// The missed notice sent after all (Amend): out of the index.
	rec, err := s.Get(ctx, "CHG-4", clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Amend(ctx, driver.AmendRequest{Key: "CHG-4", Token: rec.Token, FromStatus: rec.Status, Status: "DEBITED", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, ok := indexKeys(t, client, table)["CHG-4"]; ok {
		t.Fatal("an amended record is still in the index")
	}
	clock.Advance(2 * time.Minute) // CHG-5's lease passed
	stuck, n, err := s.Stuck(ctx, clock.Now(), 10)
	if err != nil || n != 1 || stuck[0].Key != "CHG-5" {
		t.Fatalf("Stuck = %v %d %v", keys(stuck), n, err)
	}
	if _, err := s.ListState(ctx, driver.ListRequest{State: driver.StateDone, Limit: 10, Now: clock.Now()}); !errors.Is(err, driver.ErrNotIndexed) {
		t.Fatalf("listing DONE: %v, want ErrNotIndexed (a scan)", err)
	}
	if got := api.scans.Load(); got != 0 {
		t.Fatalf("%d Scan(s): counts and lists of the index's states must be Queries", got)
	}
	if api.inProgress.Load() == 0 {
		t.Fatal("no Scan of IN_PROGRESS: the index holds none, Stuck and its count must scan")
	}
}

// A table made before the index: the store works, listings say what to
// run, stuck claims are still listed (by a Scan); setup adds the index and
// fills it from the older records. On moto, and up to setup on dynalite
// (which answers a Query of a missing index in its own words).
func TestATableWithoutTheIndex(t *testing.T) {
	for _, db := range awstest.DynamoDBs() {
		t.Run(db.Name, func(t *testing.T) { tableWithoutTheIndex(t, db) })
	}
}

// tableBeforeTheIndex is a table named after name made as one was before
// the index (its key alone), deleted when the test ends, on the client of
// a store made under prefix.
func tableBeforeTheIndex(t *testing.T, db awstest.DynamoDB, prefix, name string) (*dynamodb.Client, string) {
	t.Helper()
	_, client := storeOn(t, db, nil, prefix)
	table := awstest.Name(name)
	if _, err := client.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), client, table) })
	return client, table
}

func tableWithoutTheIndex(t *testing.T, db awstest.DynamoDB) {
	client, table := tableBeforeTheIndex(t, db, "idem", "old")
	ctx := t.Context()
	// Active before the first write (moto makes a table at once; dynalite
	// and DynamoDB answer ResourceNotFoundException while it is CREATING).
	if err := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 50 * time.Millisecond }).
		Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	s := storeThrough(t, client, table)
	clock := storetest.NewClock(storetest.Epoch)
	g := guardOn(t, s, clock)
	c, err := g.Claim(ctx, "CHG-OLD", "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Fail(ctx, c.Lease(), "FAILED", "declined"); err != nil {
		t.Fatal(err)
	}
	// An older version's record: no listState.
	if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "CHG-OLD"}}, UpdateExpression: aws.String("REMOVE listState")}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Claim(ctx, "CHG-BUSY", "fp"); err != nil {
		t.Fatal(err)
	}
	_, err = s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Now: clock.Now()})
	if !errors.Is(err, driver.ErrNotIndexed) || !strings.Contains(err.Error(), "setup") {
		t.Fatalf("ListState on a table without the index: %v, want ErrNotIndexed naming setup", err)
	}
	if _, err := s.CountByState(ctx, clock.Now()); !errors.Is(err, driver.ErrNotIndexed) {
		t.Fatalf("CountByState: %v", err)
	}
	clock.Advance(2 * time.Minute)
	if _, n, err := s.Stuck(ctx, clock.Now(), 10); err != nil || n != 1 {
		t.Fatalf("Stuck without the index = %d, %v, want 1 (by a Scan)", n, err)
	}
	if db.Name == "dynalite" {
		// dynalite 4.0.0 wants ProvisionedThroughput on an index added by
		// UpdateTable even to an on-demand table, which DynamoDB refuses
		// to take (its rule predates on-demand tables): setup's step is
		// moto's only.
		return
	}
	if err := awsdynamodb.CreateTable(ctx, client, table); err != nil && !awstest.TTLUnsupported(err) { // setup
		t.Fatal(err)
	}
	page, err := s.ListState(ctx, driver.ListRequest{State: driver.StateFailed, Now: clock.Now()})
	if err != nil || !slices.Equal(keys(page.Records), []string{"CHG-OLD"}) {
		t.Fatalf("after setup: %v %v, want the older FAILED record filled in", keys(page.Records), err)
	}
}

func keys(rs []driver.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Key)
	}
	return out
}
