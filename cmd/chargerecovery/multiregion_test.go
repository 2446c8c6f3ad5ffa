package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebanksim"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

// serve on a DynamoDB table that DescribeTable reports with replicas in two
// Regions (awstest.GlobalTable: moto 5.2 keeps no replicas), the process in
// us-east-1: refused (exit 2, before any claim) unless told the mode the
// table runs in, and started when the mode fits.
func TestServeRefusesAMultiRegionTableUnlessToldItsMode(t *testing.T) {
	useEmulator(t)
	bank := httptest.NewServer(corebanksim.Handler(corebanksim.NewLedger(corebanksim.Faults{})))
	defer bank.Close()
	name := awstest.Name("cmd-mr")
	env := map[string]string{
		"IC_BACKEND": "aws", "IC_QUEUE": name, "IC_DLQ": name + "-dlq", "IC_TABLE": name,
		"IC_COREBANK_URL": bank.URL, "IC_POLL_WAIT": "1s", "IC_LOG_FORMAT": "text", "IC_HTTP_ADDR": "127.0.0.1:0",
	}
	mustSetup(t, env)

	global := []string{"us-east-1", "us-west-2"}
	tests := []struct {
		name        string
		consistency string
		replicas    []string // nil: moto's own answer (single-Region)
		args        []string
		says        []string // nil: serve starts
	}{
		{"single-Region table, no flag", "", nil, nil, nil},
		{"global table, no flag", "EVENTUAL", global, nil,
			[]string{"replicas in us-east-1, us-west-2", "MultiRegionConsistency EVENTUAL", "set --dynamodb-multi-region strong"}},
		{"strong on a strong table", "STRONG", global, []string{"--dynamodb-multi-region", "strong"}, nil},
		{"strong on an EVENTUAL table", "EVENTUAL", global, []string{"--dynamodb-multi-region", "strong"},
			[]string{"strong consistency was named", "MultiRegionConsistency EVENTUAL", "convert the table"}},
		{"single-writer in the writer Region", "EVENTUAL", global,
			[]string{"--dynamodb-multi-region", "single-writer", "--dynamodb-writer-region", "us-east-1"}, nil},
		{"single-writer in another Region", "EVENTUAL", global,
			[]string{"--dynamodb-multi-region", "single-writer", "--dynamodb-writer-region", "us-west-2"},
			[]string{"written from Region us-west-2 only", "this process is in us-east-1", "run serve only in us-west-2", "--dynamodb-writer-region"}},
		{"an unknown mode", "", nil, []string{"--dynamodb-multi-region", "eventual"},
			[]string{`--dynamodb-multi-region (IC_DYNAMODB_MULTI_REGION) "eventual" is not strong or single-writer`}},
		{"single-writer without its Region", "", nil, []string{"--dynamodb-multi-region", "single-writer"},
			[]string{"--dynamodb-writer-region (IC_DYNAMODB_WRITER_REGION) must name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.replicas != nil {
				t.Setenv("AWS_ENDPOINT_URL", awstest.GlobalTable(t, tt.consistency, tt.replicas...))
			}
			ctx, stop := context.WithTimeout(t.Context(), 30*time.Second)
			defer stop()
			if tt.says != nil {
				r := runCmd(ctx, env, append([]string{"serve"}, tt.args...)...)
				t.Logf("serve said: %s", r.stderr)
				if r.code != exitUsage {
					t.Fatalf("serve exited %d, want %d: %s", r.code, exitUsage, r.stderr)
				}
				for _, s := range tt.says {
					if !strings.Contains(r.stderr, s) {
						t.Errorf("stderr does not say %q: %s", s, r.stderr)
					}
				}
				if strings.Contains(r.stderr, "consumer starting") {
					t.Errorf("serve started: %s", r.stderr)
				}
				return
			}
			errb, done := startCmd(ctx, env, append([]string{"serve"}, tt.args...)...)
			for !strings.Contains(errb.String(), "consumer starting") {
				select {
				case code := <-done:
					t.Fatalf("serve exited %d before starting: %s", code, errb)
				case <-time.After(50 * time.Millisecond):
				}
			}
			stop() // what SIGTERM does
			if code := <-done; code != exitOK {
				t.Fatalf("serve exited %d: %s", code, errb)
			}
		})
	}
}
