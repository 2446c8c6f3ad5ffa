package awsdynamodb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

type querier interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// notIndexed is the error of a Query on a table without IndexName: what to
// run, not a failure of the store.
func (s *Store) notIndexed() error {
	return fmt.Errorf("%w: table %s has no index %s (made before it): run chargerecovery setup --backend aws, which adds it, "+
		"or add the global secondary index of deploy/aws/stack.json", driver.ErrNotIndexed, s.table, IndexName)
}

// queryErr classifies a Query's error: a missing index is ErrNotIndexed.
func (s *Store) queryErr(op string, err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "ValidationException" && strings.Contains(strings.ToLower(ae.ErrorMessage()), "index") {
		return s.notIndexed()
	}
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) && strings.Contains(strings.ToLower(nf.ErrorMessage()), "index") {
		return s.notIndexed()
	}
	return unavailable(op, err)
}

// query reads the index partition ls (live records only, filter added to
// the retention's), from start, until want records are read (0: all) or
// the partition ends. count only counts.
func (s *Store) query(ctx context.Context, ls string, now time.Time, prefix string, start map[string]types.AttributeValue,
	filter string, values map[string]types.AttributeValue, want int, count bool) ([]driver.Record, int, error) {
	q, ok := s.api.(querier)
	if !ok {
		// A client without Query (a wrapper of API): as a table without
		// the index, so that Stuck and ListByResult scan as they did.
		return nil, 0, fmt.Errorf("%w: the DynamoDB client given cannot Query", driver.ErrNotIndexed)
	}
	cond := `#ls = :ls`
	names := pick("#ls", "#expires")
	vals := map[string]types.AttributeValue{":ls": str(ls), ":now": ms(now)}
	for k, v := range values {
		vals[k] = v
	}
	if prefix != "" {
		cond += ` AND begins_with(#pk, :prefix)`
		vals[":prefix"] = str(prefix)
	}
	// The filter names no key attribute of the index (listState, pk):
	// DynamoDB refuses a Query whose filter does (moto does not).
	f := `#expires > :now`
	if filter != "" {
		f += " AND " + filter
		// Only the names the filter uses: DynamoDB refuses an unused one.
		if strings.Contains(filter, "#lease") {
			names["#lease"] = attrLeaseUntil
		}
		if strings.Contains(filter, "#status") {
			names["#status"] = attrStatus
		}
	}
	if strings.Contains(cond+f, "#pk") {
		names["#pk"] = attrKey
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), IndexName: aws.String(IndexName),
		KeyConditionExpression: aws.String(cond), FilterExpression: aws.String(f),
		ExpressionAttributeNames: names, ExpressionAttributeValues: vals, ExclusiveStartKey: start,
	}
	if count {
		in.Select = types.SelectCount
	} else if want > 0 {
		in.Limit = aws.Int32(int32(min(want, 1000)))
	}
	var out []driver.Record
	n := 0
	for {
		page, err := q.Query(ctx, in)
		if err != nil {
			return nil, 0, s.queryErr("list", err)
		}
		n += int(page.Count)
		for _, item := range page.Items {
			rec, err := decode(item)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, rec)
		}
		if len(page.LastEvaluatedKey) == 0 || (want > 0 && len(out) >= want) {
			return out, n, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// queryAll is every live record of the index partition ls.
func (s *Store) queryAll(ctx context.Context, ls string, now time.Time, filter string, values map[string]types.AttributeValue) ([]driver.Record, error) {
	out, _, err := s.query(ctx, ls, now, "", nil, filter, values, 0, false)
	return out, err
}

// ListState implements driver.StateLister by a Query of IndexName
// (eventually consistent, as every read of an index): FAILED, WAITING
// (with a status or not: the status is a filter on the state's
// partition), and DONE with ListedResult. IN_PROGRESS, which the index
// does not hold (IndexName), is a Scan of the table (scanInProgress): an
// operator's page, at the cost Stuck documents. Any other listing (DONE as
// a whole) is ErrNotIndexed: it would be a Scan of nearly the whole table.
func (s *Store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	if req.State == driver.StateInProgress {
		return s.listInProgress(ctx, req)
	}
	ls := listStateOf(req.State, "")
	var filter string
	var values map[string]types.AttributeValue
	switch {
	case req.State == driver.StateDone:
		ls = listStateOf(req.State, req.Status)
	case req.Status != "":
		filter, values = `#status = :status`, map[string]types.AttributeValue{":status": str(req.Status)}
	}
	if ls == "" {
		return driver.ListPage{}, fmt.Errorf("%w: DynamoDB's index %s holds FAILED, WAITING and DONE %s records only; "+
			"listing %s %s would scan the whole table (look a charge up by its id)", driver.ErrNotIndexed, IndexName, ListedResult, req.State, req.Status)
	}
	limit := req.PageLimit()
	var start map[string]types.AttributeValue
	switch {
	case req.After == "" || req.After < req.Prefix:
	case strings.HasPrefix(req.After, req.Prefix):
		start = map[string]types.AttributeValue{attrListState: str(ls), attrKey: str(req.After)}
	default:
		return driver.ListPage{}, nil // the cursor is past every key of the prefix
	}
	recs, _, err := s.query(ctx, ls, req.Now, req.Prefix, start, filter, values, limit+1, false)
	if err != nil {
		return driver.ListPage{}, err
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Key < recs[j].Key })
	return driver.Page(recs[:min(len(recs), limit+1)], limit), nil
}

// listInProgress is ListState(IN_PROGRESS): a Scan filtered on the
// state, the prefix and the cursor (a Scan may filter on the table's key,
// a Query may not filter on its index's), its page the least keys.
func (s *Store) listInProgress(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
	var filter []string
	values := map[string]types.AttributeValue{}
	if req.Prefix != "" {
		filter = append(filter, `begins_with(#pk, :prefix)`)
		values[":prefix"] = str(req.Prefix)
	}
	switch {
	case req.After == "" || req.After < req.Prefix:
	case strings.HasPrefix(req.After, req.Prefix):
		filter = append(filter, `#pk > :after`)
		values[":after"] = str(req.After)
	default:
		return driver.ListPage{}, nil // the cursor is past every key of the prefix
	}
	if req.Status != "" {
		filter = append(filter, `#status = :status`)
		values[":status"] = str(req.Status)
	}
	limit := req.PageLimit()
	byKey := func(a, b driver.Record) bool { return a.Key < b.Key }
	var recs []driver.Record
	if _, err := s.scanInProgress(ctx, req.Now, strings.Join(filter, " AND "), values, false, func(r driver.Record) {
		recs = keepLeast(append(recs, r), limit+1, byKey)
	}); err != nil {
		return driver.ListPage{}, err
	}
	sort.Slice(recs, func(i, j int) bool { return byKey(recs[i], recs[j]) })
	return driver.Page(recs[:min(len(recs), limit+1)], limit), nil
}

// keepLeast sorts recs by less and drops all but the first keep once they
// are many more (so that a Scan over many matches holds a page's worth).
func keepLeast(recs []driver.Record, keep int, less func(a, b driver.Record) bool) []driver.Record {
	if len(recs) < 2*keep+1000 {
		return recs
	}
	sort.Slice(recs, func(i, j int) bool { return less(recs[i], recs[j]) })
	return recs[:keep]
}

// CountByState implements driver.StateCounter: FAILED and WAITING by a
// Query of IndexName that counts; IN_PROGRESS, which the index does not
// hold, by a Scan that counts (scanInProgress: the whole table read, as
// Stuck). DONE is not counted (not in the sparse index; counting it would
// read the whole table as well, for the one state nobody acts on).
func (s *Store) CountByState(ctx context.Context, now time.Time) (map[driver.State]int, error) {
	out, err := s.CountIndexed(ctx, now)
	if err != nil {
		return nil, err
	}
	n, err := s.scanInProgress(ctx, now, `NOT begins_with(#pk, :internal)`,
		map[string]types.AttributeValue{":internal": str(driver.InternalKeyPrefix)}, true, nil)
	if err != nil {
		return nil, err
	}
	out[driver.StateInProgress] = n
	return out, nil
}

// CountIndexed counts the states the index holds, FAILED and WAITING, by
// Queries that count: never a Scan. For a view sampled every few seconds
// (the console's overview, status.IndexCounter), which must not read the
// whole table each time as CountByState's IN_PROGRESS and Stuck do.
func (s *Store) CountIndexed(ctx context.Context, now time.Time) (map[driver.State]int, error) {
	out := map[driver.State]int{}
	for _, st := range []driver.State{driver.StateFailed, driver.StateWaiting} {
		_, n, err := s.query(ctx, string(st), now, "", nil, "", nil, 0, true)
		if err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, nil
}

// Stuck implements driver.StuckLister: the IN_PROGRESS records whose lease
// passed at or before now, oldest lease first (at most limit), and how many
// there are in all, by one Scan of the table filtered on state, lease,
// retention and key (scanInProgress). A WAITING record is never stuck: its
// lease is its not-before, and the filter names IN_PROGRESS.
//
// Why a Scan: the hot path writes no index (IndexName), so a fresh claim
// whose worker died and whose message never came back (dead-lettered, or
// past the queue's retention) is in no index; only a Scan finds it, and
// that Scan finds every other stuck claim too.
//
// What it costs per call, with the table and index on AWS: the Scan reads
// every item of the table once, whatever the filter keeps (DynamoDB bills
// a Scan by the bytes it reads, not by what it returns): the table's size
// in 4 KB read units, halved by eventual consistency — for 60 million
// records of about 400 bytes (2 million charges a day kept 30 days) about
// 3 million read units a call. The bound is per request, not per call:
// each page reads at most scanPageLimit items (and DynamoDB's 1 MB), in
// scanSegments parallel segments, so no request is large and the call's
// time is the table's size over the segments. It is an operator's read
// (chargerecovery stuck and status, the console's Stuck page); serve does
// not sample it on DynamoDB (backend.CheapCounts), nor does the console's
// overview (status.Sources.Sampled: CountIndexed only), and nothing should
// poll it. Internal keys are left out by the filter (a Scan may
// filter on the table's key; a Query may not on its index's).
func (s *Store) Stuck(ctx context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	oldest := func(a, b driver.Record) bool {
		if !a.LeaseUntil.Equal(b.LeaseUntil) {
			return a.LeaseUntil.Before(b.LeaseUntil)
		}
		return a.Key < b.Key
	}
	keep := max(limit, 1)
	var all []driver.Record
	n, err := s.scanInProgress(ctx, now, `#lease <= :now AND NOT begins_with(#pk, :internal)`,
		map[string]types.AttributeValue{":internal": str(driver.InternalKeyPrefix)}, false, func(r driver.Record) {
			all = keepLeast(append(all, r), keep, oldest)
		})
	if err != nil {
		return nil, 0, err
	}
	sort.Slice(all, func(i, j int) bool { return oldest(all[i], all[j]) })
	return all[:min(limit, len(all))], n, nil
}

// scanPageLimit is the most items one Scan request reads (DynamoDB also
// stops a page at 1 MB): the bound on each request of scanInProgress.
const scanPageLimit = 1000

// scanSegments is how many segments scanInProgress reads in parallel.
const scanSegments = 4

// scanInProgress reads every item of the table once (an eventually
// consistent Scan in scanSegments parallel segments, pages of at most
// scanPageLimit items) and calls fn, from one goroutine at a time, with
// each live IN_PROGRESS record that filter (over #pk, #lease and #status;
// :now is bound) also keeps, and returns how many there were; with count
// it only counts (Select COUNT: no item comes back; the read units are
// the same).
func (s *Store) scanInProgress(ctx context.Context, now time.Time, filter string, values map[string]types.AttributeValue,
	count bool, fn func(driver.Record)) (int, error) {
	scanner, ok := s.api.(interface {
		Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	})
	if !ok {
		return 0, errors.New("dynamodb: the client cannot Scan")
	}
	f := `#state = :ip AND #expires > :now`
	if filter != "" {
		f += " AND " + filter
	}
	used := []string{"#state", "#expires"}
	for _, n := range []string{"#pk", "#lease", "#status"} {
		if strings.Contains(filter, n) { // only the names used: DynamoDB refuses an unused one
			used = append(used, n)
		}
	}
	names := pick(used...)
	vals := map[string]types.AttributeValue{":ip": str(string(driver.StateInProgress)), ":now": ms(now)}
	for k, v := range values {
		vals[k] = v
	}
	var (
		mu       sync.Mutex
		n        int
		firstErr error
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for seg := range scanSegments {
		wg.Go(func() {
			in := &dynamodb.ScanInput{
				TableName: aws.String(s.table), Limit: aws.Int32(scanPageLimit),
				Segment: aws.Int32(int32(seg)), TotalSegments: aws.Int32(scanSegments),
				FilterExpression: aws.String(f), ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
			}
			if count {
				in.Select = types.SelectCount
			}
			p := dynamodb.NewScanPaginator(scanner, in)
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					err = unavailable("scan", err)
				}
				var recs []driver.Record
				if err == nil && !count { // moto returns the items with Select COUNT too
					for _, item := range page.Items {
						rec, derr := decode(item)
						if derr != nil {
							err = derr
							break
						}
						recs = append(recs, rec)
					}
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				stop := firstErr != nil
				if !stop {
					n += int(page.Count)
					for _, r := range recs {
						fn(r)
					}
				}
				mu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	wg.Wait()
	return n, firstErr
}

// WalkUpdated implements driver.UpdatedWalker: a consistent Scan of the
// table filtered on state, update time and retention, in four parallel
// segments (a daily reconciliation's read: every item once, its read
// capacity the table's size). Internal keys are left out.
func (s *Store) WalkUpdated(ctx context.Context, req driver.WalkRequest, fn func(driver.Record) error) error {
	scanner, ok := s.api.(interface {
		Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	})
	if !ok {
		return errors.New("dynamodb: the client cannot Scan")
	}
	const segments = 4
	var (
		mu       sync.Mutex // fn is called from one goroutine at a time
		firstErr error
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	for seg := range segments {
		wg.Go(func() {
			p := dynamodb.NewScanPaginator(scanner, &dynamodb.ScanInput{
				TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
				Segment: aws.Int32(int32(seg)), TotalSegments: aws.Int32(segments),
				FilterExpression:         aws.String(`#state = :state AND #updated >= :from AND #updated < :to AND #expires > :now AND NOT begins_with(#pk, :internal)`),
				ExpressionAttributeNames: pick("#state", "#updated", "#expires", "#pk"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":state": str(string(req.State)), ":from": ms(req.From),
					":to": ms(req.To), ":now": ms(req.Now), ":internal": str(driver.InternalKeyPrefix)},
			})
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					fail(unavailable("walk", err))
					return
				}
				for _, item := range page.Items {
					rec, err := decode(item)
					if err == nil && !req.Walked(rec) {
						continue // a millisecond's rounding at an edge
					}
					mu.Lock()
					if err == nil && firstErr == nil {
						err = fn(rec)
					}
					stop := firstErr != nil
					mu.Unlock()
					if err != nil {
						fail(err)
						return
					}
					if stop {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
