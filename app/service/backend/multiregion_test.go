package backend

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

func TestMultiRegionFlagsAreChecked(t *testing.T) {
	tests := []struct {
		name                      string
		kind, store, mode, writer string
		want                      string // "": no problem
	}{
		{"none", AWS, "", "", "", ""},
		{"strong", AWS, "", "strong", "", ""},
		{"single-writer with its Region", AWS, "", "single-writer", "eu-west-1", ""},
		{"unknown mode", AWS, "", "eventual", "", `--dynamodb-multi-region (IC_DYNAMODB_MULTI_REGION) "eventual" is not strong or single-writer`},
		{"mode in capitals", AWS, "", "STRONG", "", "--dynamodb-multi-region"},
		{"single-writer without its Region", AWS, "", "single-writer", "", "--dynamodb-writer-region (IC_DYNAMODB_WRITER_REGION) must name"},
		{"writer Region without single-writer", AWS, "", "strong", "eu-west-1", `--dynamodb-writer-region (IC_DYNAMODB_WRITER_REGION) "eu-west-1" is only for`},
		{"writer Region alone", AWS, "", "", "eu-west-1", "is only for --dynamodb-multi-region single-writer"},
		{"another backend", Embedded, "", "strong", "", "for --backend aws only"},
		{"claims on Redis", AWS, Redis, "strong", "", "with --store redis there is no table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			c.FreshDefaults()
			c.Kind, c.Store, c.MultiRegion, c.WriterRegion = tt.kind, tt.store, tt.mode, tt.writer
			c.RedisURL = "redis://127.0.0.1:6379/0"
			var p cli.Problems
			c.Check(&p)
			err := p.Err()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("problems %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// awsEnv points the standard AWS chain (the process environment) at
// endpoint, in us-east-1.
func awsEnv(t *testing.T, endpoint string) {
	t.Setenv("AWS_ENDPOINT_URL", endpoint)
	awstest.Offline(t)
}

// A table on the emulator, described as it is (single-Region) and as a
// global table (through awstest.GlobalTable), checked as serve checks it.
func TestServeChecksTheTablesRegions(t *testing.T) {
	awstest.Config(t)
	var c Config
	c.FreshDefaults()
	name := awstest.Name("mr")
	c.Kind, c.Queue, c.DLQ, c.Table = AWS, name, name+"-dlq", name
	awsEnv(t, os.Getenv(awstest.EndpointEnv))
	made, err := Open(t.Context(), c, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	made.Close()
	t.Cleanup(func() { dropAWS(c) }) // the subtests' environments are undone by then

	const strong, eventual = "STRONG", "EVENTUAL"
	global := []string{"us-east-1", "us-west-2"}
	tests := []struct {
		name         string
		consistency  string
		replicas     []string // nil: the emulator's own answer
		mode, writer string
		says         []string // nil: accepted
	}{
		{"single-Region table, no flag", "", nil, "", "", nil},
		{"single-Region table, strong", "", nil, "strong", "", nil},
		{"global table, no flag", eventual, global, "", "",
			[]string{"replicas in us-east-1, us-west-2", "MultiRegionConsistency EVENTUAL", "set --dynamodb-multi-region strong", "--dynamodb-writer-region REGION"}},
		{"replica elsewhere only, no flag", "", []string{"eu-west-1"}, "", "", []string{"replicas in eu-west-1"}},
		{"strong on a strong table", strong, global, "strong", "", nil},
		{"strong on an EVENTUAL table", eventual, global, "strong", "", []string{"strong consistency was named", "MultiRegionConsistency EVENTUAL", "convert the table"}},
		{"single-writer, the writer", eventual, global, "single-writer", "us-east-1", nil},
		{"single-writer, another Region's", eventual, global, "single-writer", "us-west-2",
			[]string{"written from Region us-west-2 only", "this process is in us-east-1", "run serve only in us-west-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			endpoint := os.Getenv(awstest.EndpointEnv)
			if tt.replicas != nil {
				endpoint = awstest.GlobalTable(t, tt.consistency, tt.replicas...)
			}
			awsEnv(t, endpoint)
			c := c
			c.MultiRegion, c.WriterRegion, c.Existing = tt.mode, tt.writer, true
			b, err := Open(t.Context(), c, 30*time.Second, false)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			err = CheckMultiRegion(t.Context(), b)
			if tt.says == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !errors.Is(err, awsdynamodb.ErrMultiRegion) {
				t.Fatalf("%v: want a usage error (exit 2) wrapping ErrMultiRegion", err)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

func TestAFailedDescribeIsNotAUsageError(t *testing.T) {
	awstest.Config(t)
	awsEnv(t, os.Getenv(awstest.EndpointEnv))
	var c Config
	c.FreshDefaults()
	name := awstest.Name("mr-missing")
	c.Kind, c.Queue, c.DLQ, c.Table = AWS, name, name+"-dlq", name
	made, err := Open(t.Context(), c, 30*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	made.Close()
	t.Cleanup(func() { dropAWS(c) })
	c.Table = name + "-none"
	b, err := Open(t.Context(), c, 30*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = CheckMultiRegion(t.Context(), b)
	var ue *cli.UsageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("%v: want the missing table named, not a usage error", err)
	}
}
