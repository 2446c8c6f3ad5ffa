// Package awstest gives integration tests an AWS configuration pointed at
// the emulator that scripts/with-moto.sh starts. A test that needs it and
// cannot reach it fails in CI (CI=true) and skips elsewhere, saying how to
// start it.
package awstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/finedge/idempotent-consumer/internal/testenv"
)

// EndpointEnv names the variable holding the emulator's URL. Tests read only
// this one, never AWS_ENDPOINT_URL alone, so they cannot reach real AWS.
const EndpointEnv = "IC_AWS_TEST_ENDPOINT"

// Config returns an aws.Config for the emulator, or ends the test.
func Config(t testing.TB) aws.Config {
	t.Helper()
	endpoint := os.Getenv(EndpointEnv)
	if endpoint == "" {
		unreachable(t, EndpointEnv+" is not set")
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(endpoint + "/moto-api/")
	if err != nil {
		unreachable(t, "cannot reach "+endpoint+": "+err.Error())
	}
	resp.Body.Close()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithBaseEndpoint(endpoint),
	)
	if err != nil {
		t.Fatalf("aws config: %v", err)
	}
	return cfg
}

func unreachable(t testing.TB, why string) {
	t.Helper()
	testenv.Unreachable(t, "SQS/DynamoDB emulator: "+why+". Start one with: scripts/with-moto.sh go test -race ./...")
}

// Name returns a unique resource name with prefix (tables, queues).
func Name(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
