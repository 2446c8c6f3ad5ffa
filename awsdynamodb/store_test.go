package awsdynamodb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/finedge/idempotent-consumer/awsdynamodb"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/internal/awstest"
)

func newStore(t *testing.T) (*awsdynamodb.Store, *dynamodb.Client) {
	t.Helper()
	return storeOver(t, nil, "idem")
}

// storeOver is a store on a fresh table of moto whose requests go through
// rt (nil: straight to the emulator).
func storeOver(t *testing.T, rt http.RoundTripper, prefix string) (*awsdynamodb.Store, *dynamodb.Client) {
	t.Helper()
	return storeOn(t, awstest.DynamoDBs()[0], rt, prefix)
}

// storeThrough is a store on table whose calls go through api (a client,
// or one wrapped to count or check them).
func storeThrough(t *testing.T, api awsdynamodb.API, table string) *awsdynamodb.Store {
	t.Helper()
	s, err := awsdynamodb.New(api, table)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storeOn is a store on a fresh table of db (moto or dynalite) whose
// requests go through rt (nil: straight to the server).
func storeOn(t *testing.T, db awstest.DynamoDB, rt http.RoundTripper, prefix string) (*awsdynamodb.Store, *dynamodb.Client) {
	t.Helper()
	cfg := db.Config(t)
	if rt != nil {
		cfg.HTTPClient = &http.Client{Transport: rt}
	}
	client := dynamodb.NewFromConfig(cfg)
	table := awstest.Name(prefix)
	if err := awsdynamodb.CreateTable(t.Context(), client, table); err != nil && !awstest.TTLUnsupported(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = awsdynamodb.DeleteTable(context.Background(), client, table) })
	s := storeThrough(t, client, table)
	return s, client
}

// The conformance suite on moto and on dynalite (which validates every
// request as DynamoDB does, and returns no item on a failed condition).
func TestConformance(t *testing.T) {
	for _, db := range awstest.DynamoDBs() {
		t.Run(db.Name, func(t *testing.T) {
			s, _ := storeOn(t, db, nil, "idem")
			storetest.Run(t, func(*testing.T) driver.Store { return s })
		})
	}
}

// BenchmarkClaim runs against the emulator: it measures this code plus
// moto, not DynamoDB's own latency (single-digit milliseconds in-region).
func BenchmarkClaim(b *testing.B) {
	client := dynamodb.NewFromConfig(awstest.Config(b))
	table := awstest.Name("bench")
	if err := awsdynamodb.CreateTable(b.Context(), client, table); err != nil {
		b.Fatal(err)
	}
	defer awsdynamodb.DeleteTable(context.Background(), client, table)
	s, err := awsdynamodb.New(client, table)
	if err != nil {
		b.Fatal(err)
	}
	storetest.Benchmark(b, s)
}

// lossyTransport forwards every request to the emulator; while armed for an
// operation, it lets the write land and then loses the answer, the way a
// 500 from DynamoDB's front end or a dropped connection does. The SDK's
// retryer then sends the same write again.
type lossyTransport struct {
	base   http.RoundTripper
	mu     sync.Mutex
	target string // X-Amz-Target suffix to hit, e.g. "PutItem"
	left   int    // answers still to lose
	mode   string // "500" or "drop"
	lost   int
}

func (l *lossyTransport) arm(target, mode string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.target, l.mode, l.left, l.lost = target, mode, n, 0
}

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	l.mu.Lock()
	hit := l.left > 0 && strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+l.target)
	if hit {
		l.left--
		l.lost++
	}
	mode := l.mode
	l.mu.Unlock()
	if !hit {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body) // the write landed; its answer is lost
	resp.Body.Close()
	if mode == "drop" {
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	body := `{"__type":"com.amazonaws.awsdynamodb.v20120810#InternalServerError","message":"injected after the write landed"}`
	return &http.Response{
		StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
		Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)),
		Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}, nil
}

// TestSDKRetryOfAWriteThatLanded: the first write of a claim, and of a
// DONE (a PutItem each; an UpdateItem for a lease built by hand), lands and its answer is lost; the SDK retries the same write. The
// claim must come back Acquired (not duplicate_in_progress) and the DONE
// succeed (not lease_lost), with one record in the table.
func TestSDKRetryOfAWriteThatLanded(t *testing.T) {
	for _, mode := range []string{"500", "drop"} {
		t.Run(mode, func(t *testing.T) {
			lossy := &lossyTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
			s, _ := storeOver(t, lossy, "lossy")
			g, err := idempotency.NewGuard(s, idempotency.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()

			lossy.arm("PutItem", mode, 1)
			c, err := g.Claim(ctx, "CHG-LOSSY", "fp")
			if err != nil || c.Outcome != idempotency.Acquired || lossy.lost != 1 {
				t.Fatalf("claim whose first answer was lost: %v %v (answers lost %d), want acquired", c.Outcome, err, lossy.lost)
			}
			lossy.arm("PutItem", mode, 1) // the finished record, written whole
			if err := g.Complete(ctx, c.Lease(), "DEBITED", "CBS0000000001"); err != nil || lossy.lost != 1 {
				t.Fatalf("DONE whose first answer was lost: %v (answers lost %d), want success", err, lossy.lost)
			}
			rec, err := g.Get(ctx, "CHG-LOSSY")
			if err != nil || rec.State != driver.StateDone || rec.Attempt != 1 || rec.Token != c.Record.Token || rec.Detail != "CBS0000000001" {
				t.Fatalf("record = %+v (%v), want one DONE record, attempt 1", rec, err)
			}
			// Anyone else's claim is still a duplicate of a DONE charge.
			dup, err := g.Claim(ctx, "CHG-LOSSY", "fp")
			if err != nil || dup.Outcome != idempotency.DuplicateDone {
				t.Fatalf("a later claim: %v %v", dup.Outcome, err)
			}
			// A lease built by hand (no claimed record) finishes in place.
			c2, err := g.Claim(ctx, "CHG-LOSSY-2", "fp")
			if err != nil {
				t.Fatal(err)
			}
			lossy.arm("UpdateItem", mode, 1)
			byHand := idempotency.Lease{Key: c2.Record.Key, Token: c2.Record.Token, Until: c2.Record.LeaseUntil, Attempt: 1}
			if err := g.Fail(ctx, byHand, "DECLINED", "R01"); err != nil || lossy.lost != 1 {
				t.Fatalf("FAILED in place whose first answer was lost: %v (answers lost %d), want success", err, lossy.lost)
			}
			if rec, err := g.Get(ctx, "CHG-LOSSY-2"); err != nil || rec.State != driver.StateFailed || rec.Fingerprint != "fp" || rec.Detail != "R01" {
				t.Fatalf("record = %+v (%v), want FAILED with its claim's fields", rec, err)
			}
		})
	}
}

// itemless stands for a DynamoDB implementation that ignores
// ReturnValuesOnConditionCheckFailure: it strips the item from every
// ConditionalCheckFailedException, so the store must read it instead.
type itemless struct {
	base     http.RoundTripper
	mu       sync.Mutex
	stripped int
}

func (it *itemless) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := it.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if json.Unmarshal(body, &m) == nil && strings.HasSuffix(fmt.Sprint(m["__type"]), "ConditionalCheckFailedException") {
		if _, ok := m["Item"]; ok {
			delete(m, "Item")
			body, _ = json.Marshal(m)
			it.mu.Lock()
			it.stripped++
			it.mu.Unlock()
		}
	}
	resp.Header.Del("X-Amz-Crc32") // the body changed
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return resp, nil
}

// The conformance suite on a DynamoDB that returns no item on a failed
// condition: a claim's duplicate and a retried finish fall back to a
// strongly consistent read.
func TestConformanceWithoutTheItemOnAFailedCondition(t *testing.T) {
	it := &itemless{base: http.DefaultTransport.(*http.Transport).Clone()}
	s, _ := storeOver(t, it, "itemless")
	storetest.Run(t, func(*testing.T) driver.Store { return s })
	if it.stripped == 0 {
		t.Fatal("no item was stripped: the run did not exercise the fallback")
	}
	t.Logf("items stripped from failed conditions: %d", it.stripped)
}

// TestLinearizable: concurrent histories on hot keys, checked by
// porcupine against the state machine, on moto, on a DynamoDB that
// returns no item on a failed condition (the read fallback), and on
// dynalite (which is one).
func TestLinearizable(t *testing.T) {
	t.Run("item on failed condition", func(t *testing.T) {
		s, _ := newStore(t)
		storetest.Linearizable(t, func(*testing.T) driver.Store { return s }, storetest.LinearizableOptions{})
	})
	t.Run("read fallback", func(t *testing.T) {
		s, _ := storeOver(t, &itemless{base: http.DefaultTransport.(*http.Transport).Clone()}, "itemless")
		storetest.Linearizable(t, func(*testing.T) driver.Store { return s }, storetest.LinearizableOptions{Histories: 30})
	})
	t.Run("dynalite", func(t *testing.T) {
		s, _ := storeOn(t, awstest.DynamoDBs()[1], nil, "lin")
		storetest.Linearizable(t, func(*testing.T) driver.Store { return s }, storetest.LinearizableOptions{})
	})
}

// beforeFirst runs hook once, just before the first request whose
// X-Amz-Target ends in target is sent once the hook is set.
// hookedPair is a store whose first request of target (sent over base)
// runs the hook set on the returned beforeFirst before it goes, and
// another store on the same table without it: the other worker.
func hookedPair(t *testing.T, base http.RoundTripper, target, prefix string) (*beforeFirst, *awsdynamodb.Store, *awsdynamodb.Store) {
	t.Helper()
	hooked := &beforeFirst{base: base, target: target}
	s, _ := storeOver(t, hooked, prefix)
	other, err := awsdynamodb.New(dynamodb.NewFromConfig(awstest.Config(t)), s.Table())
	if err != nil {
		t.Fatal(err)
	}
	return hooked, s, other
}

// msAt is ms milliseconds past midnight, 1 December 2026 (UTC).
func msAt(ms int) time.Time {
	return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

type beforeFirst struct {
	base   http.RoundTripper
	target string
	once   sync.Once
	hook   func()
}

func (b *beforeFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	// Requests before the hook is set (the table's setup reads its fill
	// marker with a GetItem) go through untouched.
	if b.hook != nil && strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+b.target) {
		b.once.Do(b.hook)
	}
	return b.base.RoundTrip(req)
}

// A reclaim that loses its race to another reclaimer, and gets back a
// record whose lease has passed by its own margin too, takes that one
// over: the sequential state machine would (the linearizability check
// found the store answering "in progress" here).
func TestAReclaimThatLosesTheRaceToAnExpiredLeaseReclaimsAgain(t *testing.T) {
	claim := func(tok string, now, until int) driver.ClaimRequest {
		return driver.ClaimRequest{Key: "CHG-RACE/1.a", Token: tok, Fingerprint: "fp", Now: msAt(now), LeaseExpiredBy: msAt(now),
			LeaseUntil: msAt(until), ExpiresAt: msAt(now).Add(time.Hour)}
	}
	hooked, c, other := hookedPair(t, http.DefaultTransport.(*http.Transport).Clone(), "UpdateItem", "race")
	ctx := t.Context()
	if r, err := other.Claim(ctx, claim("tok-A", 0, 5)); err != nil || !r.Acquired {
		t.Fatalf("A's claim: %+v %v", r, err)
	}
	// C has read A's expired record; just before its fenced reclaim is
	// sent, B reclaims A's lease with one that C's clock sees as passed.
	var bRes driver.ClaimResult
	var err error
	hooked.hook = func() { bRes, err = other.Claim(ctx, claim("tok-B", 5, 6)) }
	res, cerr := c.Claim(ctx, claim("tok-C", 6, 9))
	if err != nil || !bRes.Reclaimed {
		t.Fatalf("B's reclaim: %+v %v", bRes, err)
	}
	if cerr != nil || !res.Acquired || !res.Reclaimed || res.Record.Token != "tok-C" || res.Record.Attempt != 3 {
		t.Fatalf("C's claim = %+v %v, want C to reclaim B's passed lease (attempt 3)", res, cerr)
	}
	if rec, err := other.Get(ctx, "CHG-RACE/1.a", msAt(6)); err != nil || rec.Token != "tok-C" || rec.Attempt != 3 {
		t.Fatalf("record = %+v %v, want C's claim, attempt 3", rec, err)
	}
}

// On a DynamoDB that returns no item on a failed condition, a reopen that
// failed because the record was still IN_PROGRESS reads it afterwards; if
// the record has become FAILED meanwhile, the reopen is entitled to it and
// must take it, not answer "not FAILED" with a FAILED record.
func TestAReopenWhoseReadFindsTheRecordFailedReopensIt(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hooked, s, other := hookedPair(t, &itemless{base: http.DefaultTransport.(*http.Transport).Clone()}, "GetItem", "reopenread")
	ctx := t.Context()
	const key = "CHG-REOPEN/2.b"
	if r, err := other.Claim(ctx, driver.ClaimRequest{Key: key, Token: "tok-A", Fingerprint: "fp", Now: at, LeaseExpiredBy: at,
		LeaseUntil: at.Add(time.Minute), ExpiresAt: at.Add(time.Hour)}); err != nil || !r.Acquired {
		t.Fatalf("claim: %+v %v", r, err)
	}
	var ferr error
	hooked.hook = func() {
		ferr = other.Finish(ctx, driver.FinishRequest{Key: key, Token: "tok-A", State: driver.StateFailed, Status: "FAILED", Now: at, ExpiresAt: at.Add(time.Hour)})
	}
	rec, err := s.Reopen(ctx, driver.ReopenRequest{Key: key, Token: "tok-op", Reason: "test", Now: at, LeaseUntil: at.Add(-time.Second), ExpiresAt: at.Add(time.Hour)})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil || rec.State != driver.StateInProgress || rec.Token != "tok-op" || rec.Reopens != 1 {
		t.Fatalf("reopen = %s %s reopens %d (%v), want the record reopened under tok-op", rec.State, rec.Token, rec.Reopens, err)
	}
}

func TestItemSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"string: name and value bytes", map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "CHG-1"}}, 2 + 5},
		{"multibyte string counts bytes", map[string]types.AttributeValue{"a": &types.AttributeValueMemberS{Value: "₹"}}, 1 + 3},
		{"number: 13 significant digits", map[string]types.AttributeValue{"t": &types.AttributeValueMemberN{Value: "1764460800123"}}, 1 + 8},
		{"number: zeros are not significant", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1000"}}, 1 + 2},
		{"number: sign and point", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "-12.50"}}, 1 + 3},
		{"bool and null", map[string]types.AttributeValue{"b": &types.AttributeValueMemberBOOL{Value: true}, "z": &types.AttributeValueMemberNULL{Value: true}}, 2 + 2},
		{"map: overhead, keys and values", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"k": &types.AttributeValueMemberS{Value: "vv"}}}}, 1 + 3 + 1 + 1 + 2},
		{"sets", map[string]types.AttributeValue{
			"s": &types.AttributeValueMemberSS{Value: []string{"ab", "c"}},
			"n": &types.AttributeValueMemberNS{Value: []string{"12", "300"}},
			"b": &types.AttributeValueMemberBS{Value: [][]byte{{1, 2, 3}}}}, (1 + 3) + (1 + 2 + 2) + (1 + 3)},
		{"list", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "ab"}, &types.AttributeValueMemberN{Value: "7"}}}}, 1 + 3 + (1 + 2) + (1 + 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := awsdynamodb.ItemSize(tc.item); got != tc.want {
				t.Fatalf("ItemSize = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCapacityUnits(t *testing.T) {
	for _, tc := range []struct{ size, write, read int }{
		{0, 1, 1}, {200, 1, 1}, {1024, 1, 1}, {1025, 2, 1}, {4096, 4, 1}, {4097, 5, 2},
	} {
		if w, r := awsdynamodb.WriteUnits(tc.size), awsdynamodb.ReadUnits(tc.size); w != tc.write || r != tc.read {
			t.Errorf("size %d: %d WCU %d RCU, want %d and %d", tc.size, w, r, tc.write, tc.read)
		}
	}
}

func TestIndexWriteUnits(t *testing.T) {
	item := func(ls string) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "CHG-1"}, "state": &types.AttributeValueMemberS{Value: "DONE"}}
		if ls != "" {
			m["listState"] = &types.AttributeValueMemberS{Value: ls}
		}
		return m
	}
	big := item("FAILED")
	big["detail"] = &types.AttributeValueMemberS{Value: string(make([]byte, 1500))}
	for _, tc := range []struct {
		name          string
		before, after map[string]types.AttributeValue
		want          int
	}{
		{"absent before and after (a fresh claim, its DONE)", nil, item(""), 0},
		{"not in the index before or after", item(""), item(""), 0},
		{"enters", item(""), item("FAILED"), 1},
		{"a new item that enters", nil, item("IN_PROGRESS"), 1},
		{"leaves", item("IN_PROGRESS"), item(""), 1},
		{"stays, same partition", item("FAILED"), item("FAILED"), 1},
		{"moves partition: delete and put", item("WAITING"), item("IN_PROGRESS"), 2},
		{"a 2 KB entry", item(""), big, 2},
	} {
		if got := awsdynamodb.IndexWriteUnits(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: %d index write units, want %d", tc.name, got, tc.want)
		}
	}
}
