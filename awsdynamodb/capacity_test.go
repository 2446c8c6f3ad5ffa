package awsdynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// table is a DescribeTable answer with replicas in regions (none: a
// single-Region table) and consistency mode c.
func table(c types.MultiRegionConsistency, regions ...string) *types.TableDescription {
	t := &types.TableDescription{TableName: aws.String("charges"), TableStatus: types.TableStatusActive, MultiRegionConsistency: c}
	for _, r := range regions {
		t.Replicas = append(t.Replicas, types.ReplicaDescription{RegionName: aws.String(r), ReplicaStatus: types.ReplicaStatusActive})
	}
	return t
}

func TestCheckRegions(t *testing.T) {
	const here, there = "eu-west-1", "eu-central-1"
	strong, eventual := types.MultiRegionConsistencyStrong, types.MultiRegionConsistencyEventual
	none := awsdynamodb.RegionOptions{Region: here}
	strongMode := awsdynamodb.RegionOptions{Region: here, Mode: awsdynamodb.MultiRegionStrong}
	writerHere := awsdynamodb.RegionOptions{Region: here, Mode: awsdynamodb.MultiRegionSingleWriter, WriterRegion: here}
	writerThere := awsdynamodb.RegionOptions{Region: here, Mode: awsdynamodb.MultiRegionSingleWriter, WriterRegion: there}
	tests := []struct {
		name  string
		table *types.TableDescription
		opts  awsdynamodb.RegionOptions
		want  error    // nil: accepted
		says  []string // in the error
	}{
		{"single-Region table, no mode", table(""), none, nil, nil},
		{"the one replica is this Region", table("", here), none, nil, nil},
		{"no description at all", nil, none, nil, nil},
		{"single-Region table, strong named", table(""), strongMode, nil, nil},
		{"single-Region table, writer here", table(""), writerHere, nil, nil},

		{"two replicas, no mode", table(eventual, here, there), none, awsdynamodb.ErrMultiRegion,
			[]string{"table charges", "replicas in eu-west-1, eu-central-1", "EVENTUAL", "both win one claim", "strong, or single-writer"}},
		{"replica in another Region only, no mode", table("", there), none, awsdynamodb.ErrMultiRegion,
			[]string{"replicas in eu-central-1", "not reported (EVENTUAL by default)"}},
		{"strong table, no mode", table(strong, here, there), none, awsdynamodb.ErrMultiRegion, []string{"STRONG"}},

		{"strong named, table strong", table(strong, here, there), strongMode, nil, nil},
		{"strong named, table EVENTUAL", table(eventual, here, there), strongMode, awsdynamodb.ErrMultiRegion,
			[]string{"strong consistency was named", "MultiRegionConsistency EVENTUAL", "not STRONG"}},
		{"strong named, consistency not reported", table("", here, there), strongMode, awsdynamodb.ErrMultiRegion,
			[]string{"not reported (EVENTUAL by default)"}},

		{"single-writer, this is the writer", table(eventual, here, there), writerHere, nil, nil},
		{"single-writer on a strong table", table(strong, here, there), writerHere, nil, nil},
		{"single-writer, another Region writes", table(eventual, here, there), writerThere, awsdynamodb.ErrMultiRegion,
			[]string{"written from Region eu-central-1 only", "this process is in eu-west-1"}},
		{"single-writer elsewhere, even on a single-Region table", table(""), writerThere, awsdynamodb.ErrMultiRegion,
			[]string{"this process is in eu-west-1"}},

		{"no process Region", table(""), awsdynamodb.RegionOptions{}, awsdynamodb.ErrRegionOptions, []string{"Region is not known"}},
		{"unknown mode", table(""), awsdynamodb.RegionOptions{Region: here, Mode: "active-active"}, awsdynamodb.ErrRegionOptions,
			[]string{`"active-active"`}},
		{"single-writer without the writer", table(""), awsdynamodb.RegionOptions{Region: here, Mode: awsdynamodb.MultiRegionSingleWriter},
			awsdynamodb.ErrRegionOptions, []string{"needs the writer Region"}},
		{"writer Region without single-writer", table(""), awsdynamodb.RegionOptions{Region: here, WriterRegion: here},
			awsdynamodb.ErrRegionOptions, []string{"only for single-writer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := awsdynamodb.CheckRegions(tt.table, tt.opts)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

func TestParseMultiRegionMode(t *testing.T) {
	for in, want := range map[string]awsdynamodb.MultiRegionMode{
		"": awsdynamodb.MultiRegionNone, "strong": awsdynamodb.MultiRegionStrong, "single-writer": awsdynamodb.MultiRegionSingleWriter,
	} {
		if got, err := awsdynamodb.ParseMultiRegionMode(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"STRONG", "eventual", "single_writer", " strong"} {
		if _, err := awsdynamodb.ParseMultiRegionMode(in); !errors.Is(err, awsdynamodb.ErrRegionOptions) {
			t.Errorf("%q: %v, want ErrRegionOptions", in, err)
		}
	}
}

// describer answers DescribeTable with a fixed description (moto 5.2 keeps
// no replicas: UpdateTable's ReplicaUpdates are accepted and dropped, and
// CreateGlobalTable fails).
type describer struct {
	table *types.TableDescription
	err   error
}

func (d describer) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{Table: d.table}, d.err
}

func TestCheckTableRegionsReadsTheDescription(t *testing.T) {
	opts := awsdynamodb.RegionOptions{Region: "us-east-1"}
	if err := awsdynamodb.CheckTableRegions(t.Context(), describer{table: table("", "us-east-1", "us-west-2")}, "charges", opts); !errors.Is(err, awsdynamodb.ErrMultiRegion) {
		t.Errorf("global table: %v, want ErrMultiRegion", err)
	}
	failed := errors.New("access denied")
	if err := awsdynamodb.CheckTableRegions(t.Context(), describer{err: failed}, "charges", opts); !errors.Is(err, failed) || !strings.Contains(err.Error(), "describe table charges") {
		t.Errorf("failed describe: %v", err)
	}
}

// The single-Region path against the emulator: a table made by CreateTable
// reports no replicas and passes with no mode.
func TestCheckTableRegionsOnASingleRegionTable(t *testing.T) {
	s, client := newStore(t)
	if err := awsdynamodb.CheckTableRegions(t.Context(), client, s.Table(), awsdynamodb.RegionOptions{Region: client.Options().Region}); err != nil {
		t.Fatal(err)
	}
	out, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(s.Table())})
	if err != nil {
		t.Fatal(err)
	}
	if r := awsdynamodb.RegionsOf(out.Table); r.MultiRegion(client.Options().Region) {
		t.Errorf("emulator's table reads as multi-Region: %+v", r)
	}
}

// conflicting is a DynamoDB whose every write is rejected because another
// Region writes the same item (what a table with multi-Region strong
// consistency answers to concurrent writes).
type conflicting struct{ awsdynamodb.API }

var errConflict = &types.ReplicatedWriteConflictException{Message: aws.String("one or more items in the request are being modified by a request in another Region")}

func (conflicting) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errConflict
}

func (conflicting) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, errConflict
}

func TestAReplicatedWriteConflictIsClaimedElsewhereAndRetryable(t *testing.T) {
	s, err := awsdynamodb.New(conflicting{}, "charges")
	if err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.NewGuard(s, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(op string, err error) {
		t.Helper()
		var rwc *types.ReplicatedWriteConflictException
		switch {
		case !errors.Is(err, awsdynamodb.ErrWrittenElsewhere):
			t.Errorf("%s: %v, want ErrWrittenElsewhere", op, err)
		case !errors.Is(err, idempotency.ErrUnavailable) || !errors.Is(err, driver.ErrUnavailable):
			t.Errorf("%s: %v is not retryable (ErrUnavailable)", op, err)
		case errors.Is(err, driver.ErrLeaseLost):
			t.Errorf("%s: %v gives the lease up", op, err)
		case !errors.As(err, &rwc):
			t.Errorf("%s: %v lost the SDK's error", op, err)
		}
	}
	c, err := g.Claim(t.Context(), "CHG-1", "fp")
	if c.Outcome.Owned() {
		t.Fatalf("a conflicting claim won: %+v", c)
	}
	check("claim", err)
	// A lease as a claim that won would hold it (the record as written).
	now := g.Now()
	held := idempotency.Claim{Outcome: idempotency.Acquired, Record: driver.Record{
		Key: "CHG-1", Token: "tok", State: driver.StateInProgress, Fingerprint: "fp", Attempt: 1,
		LeaseUntil: now.Add(g.Lease()), CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(idempotency.DefaultRetention),
	}}.Lease()
	_, err = g.Extend(t.Context(), held)
	check("extend", err)
	check("complete", g.Complete(t.Context(), held, "posted", ""))
	check("fail", g.Fail(t.Context(), held, "declined", ""))
}

// legacyGlobalTable answers as DynamoDB does for a global table of version
// 2017.11.29 (Legacy): DescribeTable describes the local table only (no
// Replicas, no GlobalTableVersion, no MultiRegionConsistency: those belong
// to version 2019.11.21), and the replication group is only in
// DescribeGlobalTable's answer ("this operation only applies to version
// 2017.11.29; with 2019.11.21 use DescribeTable instead").
type legacyGlobalTable struct{ describedGlobal int }

func (l *legacyGlobalTable) DescribeTable(_ context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{Table: &types.TableDescription{TableName: in.TableName, TableStatus: types.TableStatusActive,
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages}}}, nil
}

func (l *legacyGlobalTable) DescribeGlobalTable(_ context.Context, in *dynamodb.DescribeGlobalTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeGlobalTableOutput, error) {
	l.describedGlobal++
	return &dynamodb.DescribeGlobalTableOutput{GlobalTableDescription: &types.GlobalTableDescription{GlobalTableName: in.GlobalTableName,
		GlobalTableStatus: types.GlobalTableStatusActive,
		ReplicationGroup:  []types.ReplicaDescription{{RegionName: aws.String("eu-west-1")}, {RegionName: aws.String("eu-central-1")}}}}, nil
}

// ATTACK (surface 6): the multi-Region guard reads only DescribeTable's
// Replicas, which a legacy (2017.11.29) global table never reports. Such a
// table is eventually consistent across Regions — a conditional claim is
// checked against the local replica only, so serve in eu-west-1 and serve
// in eu-central-1 can both win one charge's claim and both debit it — yet
// CheckTableRegions passes it with no flag at all, as a single-Region
// table, without ever asking DescribeGlobalTable.
func TestReview35ALegacyGlobalTablePassesAsSingleRegion(t *testing.T) {
	c := &legacyGlobalTable{}
	err := awsdynamodb.CheckTableRegions(t.Context(), c, "charges", awsdynamodb.RegionOptions{Region: "eu-west-1"})
	if !errors.Is(err, awsdynamodb.ErrMultiRegion) {
		t.Fatalf("a legacy global table replicated to eu-west-1 and eu-central-1, no --dynamodb-multi-region: %v (DescribeGlobalTable asked %d times); want ErrMultiRegion",
			err, c.describedGlobal)
	}
}

// globalLookup answers DescribeTable with a streamed table and
// DescribeGlobalTable with err.
type globalLookup struct{ err error }

func (g globalLookup) DescribeTable(_ context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return (&legacyGlobalTable{}).DescribeTable(context.Background(), in)
}

func (g globalLookup) DescribeGlobalTable(context.Context, *dynamodb.DescribeGlobalTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeGlobalTableOutput, error) {
	return nil, g.err
}

// A streamed table that is no global table passes; one whose global-table
// lookup fails (no permission) is refused: its Regions are not known.
func TestAStreamedTableIsLookedUpAsALegacyGlobalTable(t *testing.T) {
	o := awsdynamodb.RegionOptions{Region: "eu-west-1"}
	if err := awsdynamodb.CheckTableRegions(t.Context(), globalLookup{&types.GlobalTableNotFoundException{Message: aws.String("not found")}}, "charges", o); err != nil {
		t.Errorf("a streamed table that is not a global table: %v, want it accepted", err)
	}
	err := awsdynamodb.CheckTableRegions(t.Context(), globalLookup{errors.New("AccessDeniedException: not authorized")}, "charges", o)
	if !errors.Is(err, awsdynamodb.ErrMultiRegion) || !strings.Contains(err.Error(), "dynamodb:DescribeGlobalTable") {
		t.Errorf("a failed global-table lookup: %v, want the table refused, naming the permission", err)
	}
	o.Mode, o.WriterRegion = awsdynamodb.MultiRegionSingleWriter, "eu-west-1"
	if err := awsdynamodb.CheckTableRegions(t.Context(), &legacyGlobalTable{}, "charges", o); err != nil {
		t.Errorf("a legacy global table run single-writer from this Region: %v, want it accepted", err)
	}
}

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
