package awsdynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// (eventually consistent, as every read of an index): IN_PROGRESS, FAILED,
// WAITING (with a status or not: the status is a filter on the state's
// partition), and DONE with ListedResult. Any other listing (DONE as a
// whole) is ErrNotIndexed: it would be a Scan of nearly the whole table.
func (s *Store) ListState(ctx context.Context, req driver.ListRequest) (driver.ListPage, error) {
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
		return driver.ListPage{}, fmt.Errorf("%w: DynamoDB's index %s holds IN_PROGRESS, FAILED, WAITING and DONE %s records only; "+
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

// CountByState implements driver.StateCounter for the states of IndexName
// (a Query that counts, never a Scan): IN_PROGRESS, FAILED and WAITING.
// DONE is not counted (not in the sparse index; counting it would read the whole
// table).
func (s *Store) CountByState(ctx context.Context, now time.Time) (map[driver.State]int, error) {
	out := map[driver.State]int{}
	for _, st := range []driver.State{driver.StateInProgress, driver.StateFailed, driver.StateWaiting} {
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
// there are in all, by a Query of IndexName's IN_PROGRESS partition; on a
// table without the index, a Scan (read capacity grows with the table). A
// WAITING record is never stuck: its lease is its not-before, and it is
// in its own partition.
//
// Internal keys are left out here, not in the Query: pk is the index's
// sort key, and DynamoDB refuses a filter on a key attribute of the index
// queried ("Filter Expression can only contain non-primary key
// attributes"), and a key condition cannot say "does not begin with".
func (s *Store) Stuck(ctx context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	all, err := s.queryAll(ctx, string(driver.StateInProgress), now, `#lease <= :now`, nil)
	if errors.Is(err, driver.ErrNotIndexed) {
		return s.stuckScan(ctx, now, limit)
	}
	if err != nil {
		return nil, 0, err
	}
	all = slices.DeleteFunc(all, func(r driver.Record) bool { return strings.HasPrefix(r.Key, driver.InternalKeyPrefix) })
	sort.Slice(all, func(i, j int) bool { return all[i].LeaseUntil.Before(all[j].LeaseUntil) })
	return all[:min(limit, len(all))], len(all), nil
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
