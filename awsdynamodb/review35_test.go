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
)

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
