package awsdynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MultiRegionMode is how a process runs on a table with replicas in more
// than one Region (a global table). A conditional write on a global table
// in its default mode (multi-Region eventual consistency) is checked
// against the local replica only: two Regions can both win one claim, and
// a charge is debited twice. So a multi-Region table is refused unless the
// operator names one of the modes that keep a claim single.
type MultiRegionMode string

// The modes.
const (
	// MultiRegionNone (the default) allows a single-Region table only.
	MultiRegionNone MultiRegionMode = ""
	// MultiRegionStrong: the table runs multi-Region strong consistency
	// (MultiRegionConsistency STRONG): every Region's conditional write is
	// checked against all of them, and a write racing one in another
	// Region fails with ReplicatedWriteConflictException (ErrWrittenElsewhere).
	MultiRegionStrong MultiRegionMode = "strong"
	// MultiRegionSingleWriter: the table may replicate eventually, but only
	// one Region's processes write it (RegionOptions.WriterRegion); the
	// others' must not start.
	MultiRegionSingleWriter MultiRegionMode = "single-writer"
)

// MultiRegionModes are the modes an operator may name, for messages.
var MultiRegionModes = []MultiRegionMode{MultiRegionStrong, MultiRegionSingleWriter}

// ParseMultiRegionMode reads a mode as an operator writes it ("" is
// MultiRegionNone). The error wraps ErrRegionOptions.
func ParseMultiRegionMode(s string) (MultiRegionMode, error) {
	m := MultiRegionMode(s)
	if m == MultiRegionNone || slices.Contains(MultiRegionModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("%w: multi-Region mode %q is not strong or single-writer", ErrRegionOptions, s)
}

// RegionOptions are what CheckRegions checks a table against.
type RegionOptions struct {
	// Region is this process's AWS Region (the one its client calls).
	// Required.
	Region string
	// Mode is how the process runs on a multi-Region table. Default
	// MultiRegionNone: a multi-Region table is refused.
	Mode MultiRegionMode
	// WriterRegion is the one Region whose processes write, with
	// MultiRegionSingleWriter (required there, and only there).
	WriterRegion string
}

var (
	// ErrMultiRegion: the table is multi-Region and the options do not
	// make a claim on it safe. The message says what the table reported
	// and what to set.
	ErrMultiRegion = errors.New("dynamodb: multi-Region table")
	// ErrRegionOptions: the RegionOptions themselves are wrong (a caller's
	// mistake, whatever the table).
	ErrRegionOptions = errors.New("dynamodb: region options")
)

// TableRegions is what DescribeTable says about where a table lives.
type TableRegions struct {
	// Replicas are the Regions of the table's replicas, as reported (a
	// single-Region table reports none).
	Replicas []string
	// Consistency is the table's MultiRegionConsistency ("" when not
	// reported: DynamoDB's default, EVENTUAL).
	Consistency types.MultiRegionConsistency
}

// RegionsOf reads t's replicas and consistency mode.
func RegionsOf(t *types.TableDescription) TableRegions {
	if t == nil {
		return TableRegions{}
	}
	r := TableRegions{Consistency: t.MultiRegionConsistency}
	for _, rep := range t.Replicas {
		r.Replicas = append(r.Replicas, aws.ToString(rep.RegionName))
	}
	return r
}

// MultiRegion says whether the table lives in more than one Region as seen
// from region: more than one replica, or any replica in another Region.
func (r TableRegions) MultiRegion(region string) bool {
	return len(r.Replicas) > 1 || slices.ContainsFunc(r.Replicas, func(s string) bool { return s != region })
}

func (r TableRegions) describe() string {
	c := string(r.Consistency)
	if c == "" {
		c = "not reported (EVENTUAL by default)"
	}
	return fmt.Sprintf("replicas in %s (MultiRegionConsistency %s)", strings.Join(r.Replicas, ", "), c)
}

// CheckRegions refuses a table on which two Regions could both win one
// claim: a multi-Region table without a mode; with MultiRegionStrong, one
// that does not report MultiRegionConsistency STRONG; with
// MultiRegionSingleWriter, any process outside the writer Region (whatever
// the table: the operator said only that Region writes). A single-Region
// table needs no mode. The error wraps ErrMultiRegion (or ErrRegionOptions
// for options that are wrong in themselves) and says what the table
// reported. It is a pure function of DescribeTable's answer and o.
func CheckRegions(t *types.TableDescription, o RegionOptions) error {
	if o.Region == "" {
		return fmt.Errorf("%w: this process's Region is not known", ErrRegionOptions)
	}
	if _, err := ParseMultiRegionMode(string(o.Mode)); err != nil {
		return err
	}
	switch {
	case o.Mode == MultiRegionSingleWriter && o.WriterRegion == "":
		return fmt.Errorf("%w: single-writer needs the writer Region", ErrRegionOptions)
	case o.Mode != MultiRegionSingleWriter && o.WriterRegion != "":
		return fmt.Errorf("%w: a writer Region (%s) is only for single-writer", ErrRegionOptions, o.WriterRegion)
	}
	name := "the table"
	if t != nil && t.TableName != nil {
		name = "table " + *t.TableName
	}
	r := RegionsOf(t)
	if o.Mode == MultiRegionSingleWriter && o.Region != o.WriterRegion {
		return fmt.Errorf("%w: %s is written from Region %s only (single-writer), and this process is in %s",
			ErrMultiRegion, name, o.WriterRegion, o.Region)
	}
	if !r.MultiRegion(o.Region) {
		return nil
	}
	switch o.Mode {
	case MultiRegionNone:
		return fmt.Errorf("%w: %s has %s; in the default (eventual) mode a conditional write is checked against the local replica only, so two Regions could both win one claim: name the mode the table runs (strong, or single-writer with the writer Region)",
			ErrMultiRegion, name, r.describe())
	case MultiRegionStrong:
		if r.Consistency != types.MultiRegionConsistencyStrong {
			return fmt.Errorf("%w: strong consistency was named but %s has %s, not STRONG",
				ErrMultiRegion, name, r.describe())
		}
	}
	return nil
}

// Describer is the part of the DynamoDB client CheckTableRegions uses.
type Describer interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var _ Describer = (*dynamodb.Client)(nil)

// GlobalDescriber is the client's DescribeGlobalTable: a legacy global
// table (version 2017.11.29) lists its Regions only there.
type GlobalDescriber interface {
	DescribeGlobalTable(ctx context.Context, in *dynamodb.DescribeGlobalTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeGlobalTableOutput, error)
}

var _ GlobalDescriber = (*dynamodb.Client)(nil)

// CheckTableRegions reads table's description and checks it with
// CheckRegions. A failed DescribeTable is returned wrapped, as it came. A
// table with a stream (which every legacy global table has) and no
// replicas in its description is also looked up as a legacy global table
// (DescribeGlobalTable, where c has it): its replication group counts as
// its replicas, eventually consistent (legacy tables have no other mode).
// A failed lookup other than "not a global table" refuses the table: its
// Regions are not known.
func CheckTableRegions(ctx context.Context, c Describer, table string, o RegionOptions) error {
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamodb: describe table %s: %w", table, err)
	}
	td := out.Table
	gd, ok := c.(GlobalDescriber)
	if td != nil && len(td.Replicas) == 0 && td.StreamSpecification != nil && aws.ToBool(td.StreamSpecification.StreamEnabled) && ok {
		g, err := gd.DescribeGlobalTable(ctx, &dynamodb.DescribeGlobalTableInput{GlobalTableName: aws.String(table)})
		var notGlobal *types.GlobalTableNotFoundException
		switch {
		case errors.As(err, &notGlobal):
		case err != nil:
			return fmt.Errorf("%w: table %s has a stream, so it may be a legacy (2017.11.29) global table, and DescribeGlobalTable failed: %v (allow dynamodb:DescribeGlobalTable on the global-table ARN)",
				ErrMultiRegion, table, err)
		case g.GlobalTableDescription != nil && len(g.GlobalTableDescription.ReplicationGroup) > 0:
			legacy := *td
			legacy.Replicas = nil
			for _, r := range g.GlobalTableDescription.ReplicationGroup {
				legacy.Replicas = append(legacy.Replicas, types.ReplicaDescription{RegionName: r.RegionName})
			}
			legacy.MultiRegionConsistency = types.MultiRegionConsistencyEventual
			td = &legacy
		}
	}
	return CheckRegions(td, o)
}
