package awsdynamodb_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

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
