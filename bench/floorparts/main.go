// Command floorparts measures what each request shape of the AWS path costs
// a DynamoDB server, against the plain PutItem that bench/claims takes as
// the floor: the same workers write new keys with each shape in turn
// (interleaved, -rounds times), so a gap between the store's rate and its
// floor can be put on the request (a condition, ReturnConsumedCapacity,
// ReturnValuesOnConditionCheckFailure) rather than on the client. Prints
// one JSON line per shape and concurrency: the median rate and its ratio to
// the plain PutItem's median.
//
//	go run ./bench/floorparts -endpoint http://127.0.0.1:PORT -concurrency 1,8,32
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/bench/internal/parallel"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "floorparts:", err)
		os.Exit(1)
	}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// item is a record as the store writes it (awsdynamodb's encode), IN_PROGRESS or DONE.
func item(key string, done bool) map[string]types.AttributeValue {
	now := time.Now().UnixMilli()
	it := map[string]types.AttributeValue{
		"pk": s(key), "state": s("IN_PROGRESS"), "token": s("0123456789abcdef0123456789abcdef"), "fingerprint": s("fp-" + key),
		"attempt": n(1), "leaseUntil": n(now + 30000), "createdAt": n(now), "updatedAt": n(now), "expiresAt": n(now + 30*86400000),
		awsdynamodb.AttrTTL: n(now/1000 + 30*86400),
	}
	if done {
		it["state"], it["status"], it["detail"] = s("DONE"), s("DEBITED"), s("CBS0000000001")
	}
	return it
}

type shape struct {
	name string
	in   func(table, key string) *dynamodb.PutItemInput
	// on: the shape writes over the keys of this shape ("" : new keys)
	on string
}

func run(ctx context.Context) error {
	endpoint := flag.String("endpoint", os.Getenv("AWS_ENDPOINT_URL"), "DynamoDB endpoint")
	keys := flag.Int("keys", 1000, "requests per shape per round")
	conc := flag.String("concurrency", "1,8,32", "worker counts")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	flag.Parse()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithBaseEndpoint(*endpoint), config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = 64 })))
	if err != nil {
		return err
	}
	client := dynamodb.NewFromConfig(cfg)
	rcc := func(in *dynamodb.PutItemInput) *dynamodb.PutItemInput {
		in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		return in
	}
	claim := func(table, key string) *dynamodb.PutItemInput {
		return &dynamodb.PutItemInput{TableName: aws.String(table), Item: item(key, false),
			ConditionExpression:                 aws.String(`attribute_not_exists(#pk) OR #expires <= :now`),
			ExpressionAttributeNames:            map[string]string{"#pk": "pk", "#expires": "expiresAt"},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": n(time.Now().UnixMilli())},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	}
	done := func(table, key string) *dynamodb.PutItemInput {
		return &dynamodb.PutItemInput{TableName: aws.String(table), Item: item(key, true),
			ConditionExpression:                 aws.String(`#state = :ip AND #token = :token`),
			ExpressionAttributeNames:            map[string]string{"#state": "state", "#token": "token"},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":ip": s("IN_PROGRESS"), ":token": s("0123456789abcdef0123456789abcdef")},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	}
	shapes := []shape{
		{name: "plain", in: func(t, k string) *dynamodb.PutItemInput {
			return &dynamodb.PutItemInput{TableName: aws.String(t), Item: item(k, true)}
		}},
		{name: "plain+rcc", in: func(t, k string) *dynamodb.PutItemInput {
			return rcc(&dynamodb.PutItemInput{TableName: aws.String(t), Item: item(k, true)})
		}},
		{name: "least-cond", in: func(t, k string) *dynamodb.PutItemInput {
			return &dynamodb.PutItemInput{TableName: aws.String(t), Item: item(k, true),
				ConditionExpression: aws.String("attribute_not_exists(#pk)"), ExpressionAttributeNames: map[string]string{"#pk": "pk"}}
		}},
		{name: "claim", in: claim},
		{name: "claim+rcc", in: func(t, k string) *dynamodb.PutItemInput { return rcc(claim(t, k)) }},
		{name: "done", in: done, on: "claim"},
	}
	for _, cs := range strings.Split(*conc, ",") {
		workers, err := strconv.Atoi(cs)
		if err != nil {
			return err
		}
		table := fmt.Sprintf("floorparts-%d-%d", workers, time.Now().UnixNano())
		if err := awsdynamodb.CreateTable(ctx, client, table); err != nil && !strings.Contains(err.Error(), "TTL") {
			return err
		}
		rates := map[string][]float64{}
		for r := range *rounds {
			for _, sh := range shapes {
				prefix := fmt.Sprintf("%s-%d", sh.name, r)
				if sh.on != "" {
					prefix = fmt.Sprintf("%s-%d", sh.on, r)
				}
				start := time.Now()
				if err := parallel.Do(workers, *keys, func(i int) error {
					_, err := client.PutItem(ctx, sh.in(table, fmt.Sprintf("%s-%07d", prefix, i)))
					return err
				}); err != nil {
					return fmt.Errorf("%s: %w", sh.name, err)
				}
				rates[sh.name] = append(rates[sh.name], float64(*keys)/time.Since(start).Seconds())
			}
		}
		_ = awsdynamodb.DeleteTable(ctx, client, table)
		plain := median(rates["plain"])
		for _, sh := range shapes {
			m := median(rates[sh.name])
			_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"concurrency": workers, "shape": sh.name,
				"per_s": int(m), "of_plain": float64(int(m/plain*1000)) / 1000, "rounds": rates[sh.name]})
		}
	}
	return nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
