// Command claims drives our DynamoDB store the way bench/powertools drives
// AWS Powertools' idempotency utility, for a side-by-side run on one
// emulator (scripts/bench-vs-powertools.sh runs both):
//
//   - fresh: K keys, each run once through idempotency.Guard.Do (claim,
//     no-op work, DONE), by N workers;
//   - duplicates: the same K keys again; every one must come back as the
//     stored result, with the work not run;
//   - reclaim (with -reclaims R): R keys claimed with a lease that is let run
//     out, then taken over and finished;
//   - raw (with -raw): K unconditional PutItems of a DONE record's copy on
//     new keys by the same N workers, run before and after the claims: the
//     server's plain write rate, whose half is the floor of a fresh charge
//     (two writes) and which, divided by the requests a duplicate takes
//     (one where the server returns the item on a failed condition, two
//     where it does not), is the floor of a duplicate.
//
// It prints one JSON line per concurrency, with the capacity units DynamoDB
// bills for each phase, counted from every request and its item by
// DynamoDB's published rules (see awsdynamodb.ItemSize), the sparse
// index's write units among them (awsdynamodb.IndexWriteUnits), and those
// the service reported with ReturnConsumedCapacity=INDEXES, the table's and
// the indexes' (moto reports a constant 1 for PutItem and nothing for
// UpdateItem; neither moto nor dynalite reports index units; real DynamoDB
// reports successful writes only).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/bench/internal/parallel"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "claims:", err)
		os.Exit(1)
	}
}

// Row is one concurrency's figures; bench/powertools prints the same keys.
type Row struct {
	Impl        string  `json:"impl"`
	Concurrency int     `json:"concurrency"`
	Keys        int     `json:"keys"`
	FreshPerS   float64 `json:"fresh_per_s"`
	DupPerS     float64 `json:"dup_per_s"`
	WorkRuns    int64   `json:"work_runs"` // must equal keys: duplicates never run the work
	// With -raw: the plain PutItem rate (the mean of a phase before and one
	// after the claims), and fresh and duplicate rates against their floors.
	RawPutPerS float64 `json:"raw_put_per_s,omitempty"`
	// RawCondPutPerS is the same PutItem with the least condition there is
	// (attribute_not_exists on the key): what evaluating a condition costs
	// the server, which every claim and DONE must pay.
	RawCondPutPerS float64 `json:"raw_cond_put_per_s,omitempty"`
	FreshOfFloor   float64 `json:"fresh_of_floor,omitempty"`
	DupOfFloor     float64 `json:"dup_of_floor,omitempty"`
	RequestsPerDup float64 `json:"requests_per_dup,omitempty"`
	// DialsFresh and DialsDup are the connections the client opened in
	// each phase: 0 when every worker kept its connection warm.
	DialsFresh int64  `json:"dials_fresh"`
	DialsDup   int64  `json:"dials_dup"`
	Capacity   *Units `json:"capacity,omitempty"`
}

// Units are capacity units per operation of each phase: the table's
// (…WCU, …RCU) and the sparse index's writes (…IndexWCU), by DynamoDB's
// rules; a fresh charge's bill is FreshWCU + FreshIndexWCU.
type Units struct {
	FreshWCU, FreshRCU     float64
	DupWCU, DupRCU         float64
	ReclaimWCU, ReclaimRCU float64
	FreshIndexWCU          float64
	DupIndexWCU            float64
	ReclaimIndexWCU        float64
	ItemBytes              int     // a DONE record
	ReportedFreshWCU       float64 // what the service said for the table (ReturnConsumedCapacity=INDEXES), per fresh charge
	ReportedFreshIndexWCU  float64 // and for the indexes (the emulators report none)
	CallsPerFresh          float64
	CallsPerDup            float64
	CallsPerReclaim        float64
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("claims", flag.ContinueOnError)
	endpoint := fs.String("endpoint", os.Getenv("AWS_ENDPOINT_URL"), "DynamoDB endpoint (the emulator); empty: the SDK's default (real AWS)")
	keys := fs.Int("keys", 1000, "keys per phase")
	conc := fs.String("concurrency", "1,8,32", "comma-separated worker counts")
	reclaims := fs.Int("reclaims", 20, "keys for the reclaim phase (0: skip)")
	raw := fs.Bool("raw", false, "also measure the server's plain PutItem rate, before and after the claims, and report the claims against that floor")
	idle := fs.Int("idle-conns", 64, "the HTTP transport's MaxIdleConnsPerHost (the SDK's default is 10: fewer than the workers reopens connections)")
	reported := fs.Bool("reported", true, "ask the server for the consumed capacity (ReturnConsumedCapacity=INDEXES) on the store's requests; false: the store's requests as it sends them, as the -raw floor's are")
	cpuprofile := fs.String("cpuprofile", "", "write the client's CPU profile (every phase of every level) to this file, for go tool pprof")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var levels []int
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-concurrency %q: want positive integers separated by commas", *conc)
		}
		levels = append(levels, n)
	}
	if *keys < 1 || *reclaims < 0 {
		return errors.New("-keys must be positive and -reclaims not negative")
	}
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConnsPerHost = *idle // 64: one warm connection per worker
			dial := t.DialContext
			t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, addr)
			}
		}))}
	if *endpoint != "" { // the emulator: any region and dummy credentials do
		opts = append(opts, config.WithBaseEndpoint(*endpoint), config.WithRegion("us-east-1"),
			config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return err
	}
	client := dynamodb.NewFromConfig(cfg)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, n := range levels {
		row, err := measure(ctx, client, n, *keys, *reclaims, *raw, *reported)
		if err != nil {
			return err
		}
		if err := json.NewEncoder(os.Stdout).Encode(row); err != nil {
			return err
		}
	}
	return nil
}

// dials counts the connections the client opened.
var dials atomic.Int64

func measure(ctx context.Context, client *dynamodb.Client, workers, keys, reclaims int, raw, reported bool) (Row, error) {
	table := fmt.Sprintf("claims-bench-%d-%d", workers, time.Now().UnixNano())
	if err := awsdynamodb.CreateTable(ctx, client, table); err != nil && !ttlUnsupported(err) {
		return Row{}, err
	}
	defer func() { _ = awsdynamodb.DeleteTable(context.Background(), client, table) }()
	meter := &meter{api: client, noReport: !reported}
	store, err := awsdynamodb.New(meter, table)
	if err != nil {
		return Row{}, err
	}
	guard, err := idempotency.NewGuard(store, idempotency.Options{})
	if err != nil {
		return Row{}, err
	}
	var runs atomic.Int64
	work := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		runs.Add(1)
		return idempotency.Done{Status: "DEBITED", Detail: "CBS0000000001"}, nil
	}
	key := func(i int) string { return fmt.Sprintf("CHG-%d-%07d", workers, i) }
	phase := func(want idempotency.Outcome) (float64, error) {
		start := time.Now()
		err := parallel.Do(workers, keys, func(i int) error {
			res, err := guard.Do(ctx, key(i), "fp-"+key(i), work, idempotency.DoOptions{})
			if err == nil && res.Outcome != want {
				err = fmt.Errorf("%s: %s, want %s", key(i), res.Outcome, want)
			}
			return err
		})
		return float64(keys) / time.Since(start).Seconds(), err
	}
	row := Row{Impl: "ours", Concurrency: workers, Keys: keys}
	u := &Units{}
	var rawItem map[string]types.AttributeValue
	var rawBefore float64
	if raw {
		// A DONE record as the claims leave it, written plainly.
		if _, err := guard.Do(ctx, "WARM-"+key(0), "fp", work, idempotency.DoOptions{}); err != nil {
			return Row{}, err
		}
		runs.Store(0)
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "WARM-" + key(0)}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return Row{}, err
		}
		rawItem = out.Item
		if rawBefore, err = rawPuts(ctx, client, table, rawItem, "RAW1", workers, keys, false); err != nil {
			return Row{}, err
		}
	}
	meter.reset()
	d0 := dials.Load()
	if row.FreshPerS, err = phase(idempotency.Acquired); err != nil {
		return Row{}, fmt.Errorf("fresh: %w", err)
	}
	fresh := meter.reset()
	d1 := dials.Load()
	if row.DupPerS, err = phase(idempotency.DuplicateDone); err != nil {
		return Row{}, fmt.Errorf("duplicates: %w", err)
	}
	dup := meter.reset()
	row.DialsFresh, row.DialsDup = d1-d0, dials.Load()-d1
	row.WorkRuns = runs.Load()
	if raw {
		after, err := rawPuts(ctx, client, table, rawItem, "RAW2", workers, keys, false)
		if err != nil {
			return Row{}, err
		}
		if row.RawCondPutPerS, err = rawPuts(ctx, client, table, rawItem, "RAWC", workers, keys, true); err != nil {
			return Row{}, err
		}
		row.RawPutPerS = (rawBefore + after) / 2
		row.RequestsPerDup = float64(dup.calls) / float64(keys)
		row.FreshOfFloor = row.FreshPerS / (row.RawPutPerS / 2)
		row.DupOfFloor = row.DupPerS / (row.RawPutPerS / max(row.RequestsPerDup, 1))
	}
	per := func(v float64, n int) float64 { return v / float64(n) }
	u.FreshWCU, u.FreshRCU, u.CallsPerFresh = per(fresh.wcu, keys), per(fresh.rcu, keys), per(float64(fresh.calls), keys)
	u.ReportedFreshWCU, u.ReportedFreshIndexWCU = per(fresh.reported, keys), per(fresh.reportedIdx, keys)
	u.FreshIndexWCU, u.DupIndexWCU = per(fresh.idx, keys), per(dup.idx, keys)
	u.DupWCU, u.DupRCU, u.CallsPerDup = per(dup.wcu, keys), per(dup.rcu, keys), per(float64(dup.calls), keys)
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key(0)}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Row{}, err
	}
	u.ItemBytes = awsdynamodb.ItemSize(out.Item)
	if reclaims > 0 {
		if err := reclaim(ctx, meter, store, reclaims, workers, u); err != nil {
			return Row{}, fmt.Errorf("reclaim: %w", err)
		}
	}
	row.Capacity = u
	return row, nil
}

// reclaim claims keys with a short lease that runs out (a dead worker),
// then takes each over and finishes it, counting the takeover's units.
func reclaim(ctx context.Context, meter *meter, store driver.Store, n, workers int, u *Units) error {
	const lease = 200 * time.Millisecond
	dead, err := idempotency.NewGuard(store, idempotency.Options{Lease: lease, SkewMargin: time.Millisecond})
	if err != nil {
		return err
	}
	live, err := idempotency.NewGuard(store, idempotency.Options{SkewMargin: time.Millisecond})
	if err != nil {
		return err
	}
	key := func(i int) string { return fmt.Sprintf("DEAD-%d-%05d", workers, i) }
	for i := range n {
		if _, err := dead.Claim(ctx, key(i), "fp"); err != nil {
			return err
		}
	}
	time.Sleep(lease + 50*time.Millisecond)
	meter.reset()
	for i := range n {
		res, err := live.Do(ctx, key(i), "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
			return idempotency.Done{Status: "DEBITED"}, nil
		}, idempotency.DoOptions{})
		if err != nil {
			return err
		}
		if res.Outcome != idempotency.Reclaimed {
			return fmt.Errorf("%s: %s, want reclaimed", key(i), res.Outcome)
		}
	}
	c := meter.reset()
	u.ReclaimWCU, u.ReclaimRCU, u.CallsPerReclaim = c.wcu/float64(n), c.rcu/float64(n), float64(c.calls)/float64(n)
	u.ReclaimIndexWCU = c.idx / float64(n)
	return nil
}

// ttlUnsupported: the server made the table but has no TTL (dynalite);
// the bench's records never live long enough to need it.
func ttlUnsupported(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException" && strings.Contains(err.Error(), "enable TTL")
}

// rawPuts writes item under n new keys with plain PutItems (no condition,
// or with cond the least one: the key absent; nothing returned) on workers
// goroutines, and returns the rate.
func rawPuts(ctx context.Context, client *dynamodb.Client, table string, item map[string]types.AttributeValue, prefix string, workers, n int, cond bool) (float64, error) {
	start := time.Now()
	err := parallel.Do(workers, n, func(i int) error {
		it := make(map[string]types.AttributeValue, len(item))
		for k, v := range item {
			it[k] = v
		}
		it["pk"] = &types.AttributeValueMemberS{Value: fmt.Sprintf("%s-%d-%07d", prefix, workers, i)}
		in := &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}
		if cond {
			in.ConditionExpression = aws.String("attribute_not_exists(#pk)")
			in.ExpressionAttributeNames = map[string]string{"#pk": "pk"}
		}
		_, err := client.PutItem(ctx, in)
		return err
	})
	return float64(n) / time.Since(start).Seconds(), err
}
