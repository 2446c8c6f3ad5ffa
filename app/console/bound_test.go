package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/queue"
)

// olgaSignsIn is a token file with olga's operator token, the sign-in
// that reads it, and an audit log in a directory of the test's own.
func olgaSignsIn(t *testing.T) (*TokenAuth, *AuditLog) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(TokenLine("olga", Operator, "olga-0123456789abcdef", "")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := NewTokenAuth(TokenOptions{File: tokens})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := OpenAuditLog(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	return auth, audit
}

// 1,000 client addresses keep at most MaxClients rate limiters and counts,
// and every refused sign-in is still counted in the summary.
func TestRateLimitersAndRefusalCountsAreBounded(t *testing.T) {
	auth, audit := olgaSignsIn(t)
	c, err := New(Options{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), Auth: auth, Audit: audit, MaxClients: 50,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	for i := range 1000 {
		req := httptest.NewRequest("POST", "/signin", strings.NewReader(url.Values{"token": {"wrong-0123456789abcdef"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "127.0.0.1:4000"
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.1", i/250, i%250))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, rec.Code)
		}
	}
	if n, m := c.limiters.Len(), c.refused.Len(); n > 50 || m > 50 {
		t.Fatalf("%d limiters and %d refusal counts kept, want at most 50", n, m)
	}
	total := c.refusedElsewhere
	for _, k := range c.refused.Keys() {
		n, _ := c.refused.Peek(k)
		total += n.count
	}
	if total != 1000 {
		t.Fatalf("%d refused sign-ins counted, want 1000", total)
	}
}

// countingQueue is an operator queue whose DLQ holds two debit_failed
// entries, counting how often the DLQ is read; approximate makes its
// depth an estimate, as SQS's.
type countingQueue struct {
	approximate bool
	reads       atomic.Int32
}

func (q *countingQueue) Depth(context.Context) (queue.Depth, error) {
	return queue.Depth{DLQ: 2, Approximate: q.approximate}, nil
}
func (q *countingQueue) Ping(context.Context) error { return nil }
func (q *countingQueue) Redrive(context.Context, queue.RedriveOptions) (queue.RedriveReport, error) {
	q.reads.Add(1)
	return queue.RedriveReport{DryRun: true, Seen: 2, SeenByCode: map[queue.Code]int{"debit_failed": 2}}, nil
}

// The overview samples every Refresh; where the queue's counts are
// estimates (SQS), it reads the DLQ by reason at most every DLQScan (a
// read receives every DLQ message) and says the counts are approximate
// and how old the reasons are. Elsewhere it reads the DLQ every sample.
func TestTheOverviewReadsAnSQSDLQAtMostOnceAMinute(t *testing.T) {
	for _, tc := range []struct {
		name        string
		approximate bool
		wantReads   int32 // in 13 samples 5s apart (one minute)
	}{
		{"SQS: counts are estimates", true, 2},
		{"a database: exact counts", false, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			auth, audit := olgaSignsIn(t)
			start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			var now atomic.Int64
			now.Store(start.UnixNano())
			q := &countingQueue{approximate: tc.approximate}
			c, err := New(Options{Queue: q, Store: memstore.New(), Auth: auth, Audit: audit, Refresh: 5 * time.Second,
				Now: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 13 {
				now.Store(start.Add(time.Duration(i) * 5 * time.Second).UnixNano())
				c.sample(t.Context())
				v := c.overviewData(t.Context())
				if len(v.Codes) != 1 || v.Codes[0].Count != 2 || v.Approximate != tc.approximate {
					t.Fatalf("sample %d: codes %v, approximate %v", i, v.Codes, v.Approximate)
				}
				if want := tc.approximate && i%12 != 0; v.CodesOlder != want {
					t.Errorf("sample %d: reasons older than the sample %v, want %v", i, v.CodesOlder, want)
				}
			}
			if got := q.reads.Load(); got != tc.wantReads {
				t.Errorf("the DLQ was read %d times in a minute of samples, want %d", got, tc.wantReads)
			}
		})
	}
}
