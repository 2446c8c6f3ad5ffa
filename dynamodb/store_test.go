package dynamodb_test

import (
	"context"
	"testing"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/finedge/idempotent-consumer/dynamodb"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

func newStore(t *testing.T) (*dynamodb.Store, *awsddb.Client) {
	t.Helper()
	client := awsddb.NewFromConfig(awstest.Config(t))
	table := awstest.Name("idem")
	if err := dynamodb.CreateTable(t.Context(), client, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dynamodb.DeleteTable(t.Context(), client, table) })
	s, err := dynamodb.New(client, table)
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

func TestConformance(t *testing.T) {
	s, _ := newStore(t)
	storetest.Run(t, func(*testing.T) idempotency.Store { return s })
}

// BenchmarkClaim runs against the emulator: it measures this code plus
// moto, not DynamoDB's own latency (single-digit milliseconds in-region).
func BenchmarkClaim(b *testing.B) {
	client := awsddb.NewFromConfig(awstest.Config(b))
	table := awstest.Name("bench")
	if err := dynamodb.CreateTable(b.Context(), client, table); err != nil {
		b.Fatal(err)
	}
	defer dynamodb.DeleteTable(context.Background(), client, table)
	s, err := dynamodb.New(client, table)
	if err != nil {
		b.Fatal(err)
	}
	storetest.Benchmark(b, s)
}
