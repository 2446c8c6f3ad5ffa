// Package awstest gives integration tests an AWS configuration pointed at
// the emulators that scripts/with-moto.sh starts: moto (SQS, DynamoDB, SNS)
// and dynalite (a second DynamoDB implementation, which refuses requests
// that DynamoDB refuses and moto accepts). A test that needs one and cannot
// reach it fails in CI (CI=true) and skips elsewhere, saying how to start
// it.
package awstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go"

	"github.com/finedge/idempotent-consumer/internal/testenv"
)

// EndpointEnv names the variable holding the emulator's URL. Tests read only
// this one, never AWS_ENDPOINT_URL alone, so they cannot reach real AWS.
const EndpointEnv = "IC_AWS_TEST_ENDPOINT"

// DynaliteEnv names the variable holding dynalite's URL (DynamoDB only).
const DynaliteEnv = "IC_DYNALITE_TEST_ENDPOINT"

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
	return configFor(t, endpoint)
}

// DynaliteConfig returns an aws.Config for dynalite, or ends the test (it
// fails in CI, skips elsewhere). dynalite keeps no TTL: see TTLUnsupported.
func DynaliteConfig(t testing.TB) aws.Config {
	t.Helper()
	endpoint := os.Getenv(DynaliteEnv)
	if endpoint == "" {
		testenv.Unreachable(t, "dynalite: "+DynaliteEnv+" is not set. Start it with: scripts/with-moto.sh go test -race ./... (needs node and npm)")
	}
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(endpoint) // dynalite answers any request, a bare GET with 400
	if err != nil {
		testenv.Unreachable(t, "dynalite: cannot reach "+endpoint+": "+err.Error()+". Start it with: scripts/with-moto.sh go test -race ./...")
	}
	resp.Body.Close()
	return configFor(t, endpoint)
}

// DynamoDB is a DynamoDB implementation the store's suites run on.
type DynamoDB struct {
	Name   string                      // "moto" or "dynalite"
	Config func(testing.TB) aws.Config // ends the test when the server is not there
}

// DynamoDBs are the implementations the DynamoDB store's suites run on:
// moto, and dynalite, which validates requests as DynamoDB does (moto
// accepts, for one, a Query whose filter names the index's key).
func DynamoDBs() []DynamoDB {
	return []DynamoDB{{"moto", Config}, {"dynalite", DynaliteConfig}}
}

// TTLUnsupported: the server made the table but refused to switch its TTL
// on (dynalite has no UpdateTimeToLive); tests' records never live long
// enough to need it.
func TTLUnsupported(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException" && strings.Contains(err.Error(), "enable TTL")
}

func configFor(t testing.TB, endpoint string) aws.Config {
	t.Helper()
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

// Offline gives the AWS SDK's standard chain (which reads the process
// environment) a region and static test credentials, and no shared config
// or credentials file: nothing of the machine's own.
func Offline(t testing.TB) {
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
}

// Name returns a unique resource name with prefix (tables, queues).
func Name(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// GlobalTable returns the URL of a proxy to the emulator whose every
// DescribeTable answer reports replicas in regions and, unless empty, the
// MultiRegionConsistency consistency ("EVENTUAL" or "STRONG"): a global
// table as DynamoDB describes it. moto 5.2 keeps no replicas (UpdateTable's
// ReplicaUpdates are accepted and dropped, CreateGlobalTable fails), so the
// multi-Region checks are tested through this answer; every other request
// goes to the emulator as it is. The proxy stops with the test.
func GlobalTable(t testing.TB, consistency string, regions ...string) string {
	t.Helper()
	Config(t) // fails in CI / skips elsewhere when unreachable
	target, err := url.Parse(os.Getenv(EndpointEnv))
	if err != nil {
		t.Fatalf("%s: %v", EndpointEnv, err)
	}
	replicas := make([]map[string]string, 0, len(regions))
	for _, r := range regions {
		replicas = append(replicas, map[string]string{"RegionName": r, "ReplicaStatus": "ACTIVE"})
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK || !strings.HasSuffix(resp.Request.Header.Get("X-Amz-Target"), ".DescribeTable") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var out map[string]map[string]any
		if err := json.Unmarshal(body, &out); err != nil || out["Table"] == nil {
			return fmt.Errorf("awstest: DescribeTable answer %q: %v", body, err)
		}
		out["Table"]["Replicas"] = replicas
		if consistency != "" {
			out["Table"]["MultiRegionConsistency"] = consistency
		}
		if body, err = json.Marshal(out); err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		// The client checks this header (as 0 when it is absent).
		resp.Header.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
		return nil
	}
	rp.ErrorLog = log.New(io.Discard, "", 0) // a client gone at the end of a test is no news
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}
