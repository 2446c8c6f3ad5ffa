package status_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memqueue"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/sqlite"
	"github.com/finedge/idempotent-consumer/sqlite/sqlitetest"
)

// A store that counts every state reports DONE even at 0: status on a
// fresh SQLite file (or memory) counts it, without the note meant for
// DynamoDB, which does not count DONE.
func TestAStoreWithNoDoneRecordsStillCountsDone(t *testing.T) {
	db := sqlitetest.Open(t, "c.db", sqlite.OpenOptions{})
	for name, store := range map[string]driver.Store{"sqlite": sqlite.NewStore(db), "memory": memstore.New()} {
		rep, err := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: store, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range driver.States {
			if n, ok := rep.Records[st]; !ok || n != 0 {
				t.Errorf("%s: %s counted %d (present %v), want 0, counted", name, st, n, ok)
			}
		}
		if rep.RecordsNote != "" {
			t.Errorf("%s: the note %q, want none (every state is counted)", name, rep.RecordsNote)
		}
	}
}

// scanning is a store whose IN_PROGRESS count and stuck claims are a Scan
// of every record (as DynamoDB's): it counts the calls of each.
type scanning struct {
	*memstore.Store
	scans, indexed int
}

func (s *scanning) CountIndexed(context.Context, time.Time) (map[driver.State]int, error) {
	s.indexed++
	return map[driver.State]int{driver.StateFailed: 3, driver.StateWaiting: 2}, nil
}

func (s *scanning) CountByState(ctx context.Context, now time.Time) (map[driver.State]int, error) {
	s.scans++
	return s.Store.CountByState(ctx, now)
}

func (s *scanning) Stuck(ctx context.Context, now time.Time, limit int) ([]driver.Record, int, error) {
	s.scans++
	return s.Store.Stuck(ctx, now, limit)
}

// The console's overview, sampled every few seconds, never scans a store
// whose IN_PROGRESS records are found only by a Scan (DynamoDB): it counts
// what the index holds and says what it left out; status, asked once,
// counts everything and lists the stuck claims.
func TestASampleDoesNotScanTheTable(t *testing.T) {
	s := &scanning{Store: memstore.New()}
	src := status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: s, Now: time.Now(), Sampled: true}
	rep, err := status.Collect(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	if s.scans != 0 || s.indexed != 1 || rep.Stuck != -1 || rep.Records[driver.StateFailed] != 3 || rep.Records[driver.StateWaiting] != 2 ||
		!strings.Contains(rep.RecordsNote, "IN_PROGRESS, stuck claims and DONE not counted") {
		t.Fatalf("a sample: %d scans, %d index counts, stuck %d, records %v (%s); want no scan, the index's counts, stuck not known",
			s.scans, s.indexed, rep.Stuck, rep.Records, rep.RecordsNote)
	}
	src.Sampled = false
	if rep, err = status.Collect(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	if s.scans != 2 || rep.Stuck != 0 {
		t.Fatalf("status: %d scans, stuck %d; want the count and the stuck claims read", s.scans, rep.Stuck)
	}
}

type bank struct{ fail bool }

func (b bank) Debit(context.Context, charge.DebitRequest) (charge.DebitReceipt, error) {
	if b.fail {
		return charge.DebitReceipt{}, errors.New("timeout")
	}
	time.Sleep(2 * time.Millisecond)
	return charge.DebitReceipt{Reference: "CBS1"}, nil
}

// The console's charts read the consumer's debit counters and latency
// histogram from its /metrics.
func TestCollectReadsTheConsumersDebits(t *testing.T) {
	m := metrics.New()
	ok, bad := m.Debiter(bank{}), m.Debiter(bank{fail: true})
	for range 3 {
		if _, err := ok.Debit(t.Context(), charge.DebitRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = bad.Debit(t.Context(), charge.DebitRequest{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	rep, err := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), MetricsURL: srv.URL, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Consumer.Debits
	if !d.Known || d.Succeeded != 3 || d.Calls != 4 || d.Seconds < 0.006 {
		t.Fatalf("debits %+v, want 3 succeeded of 4 calls, 6 ms or more", d)
	}
	if n := len(d.Buckets); n < 5 || d.Buckets[math.Inf(1)] != 4 {
		t.Fatalf("buckets %v", d.Buckets)
	}
}

// status (and the console, which shows the same report) says the
// consumer's posting window as its /metrics report it, and prints it: a
// consumer whose window is closed shows so (issue 39: status, /readyz and
// a metric say it), its time in UTC whatever the calendar's zone.
func TestCollectReadsThePostingWindow(t *testing.T) {
	utc := time.Date(2026, 12, 4, 3, 30, 0, 0, time.UTC)
	ist := time.Date(2026, 12, 7, 6, 0, 0, 0, time.FixedZone("IST", 19800))
	for _, tt := range []struct {
		open  bool
		until time.Time
		want  string
	}{
		{false, utc, "outside posting window until 2026-12-04T03:30:00Z: no debit is posted, charges wait on the queue"},
		{true, utc, "posting window open until 2026-12-04T03:30:00Z"},
		{false, ist, "outside posting window until 2026-12-07T00:30:00Z: no debit is posted, charges wait on the queue"},
		{true, ist, "posting window open until 2026-12-07T00:30:00Z"},
	} {
		m := metrics.New()
		m.PostingWindow(func() (bool, time.Time) { return tt.open, tt.until })
		srv := httptest.NewServer(m.Handler())
		rep, err := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), MetricsURL: srv.URL, Now: time.Now()})
		srv.Close()
		if err != nil || rep.Consumer.Window != tt.want {
			t.Errorf("window %q (%v), want %q", rep.Consumer.Window, err, tt.want)
		}
		var out bytes.Buffer
		status.Print(&out, rep)
		if !strings.Contains(out.String(), "window    "+tt.want) {
			t.Errorf("open=%v: status:\n%s\nwant %q", tt.open, out.String(), tt.want)
		}
	}
	// A consumer without a calendar reports none.
	srv := httptest.NewServer(metrics.New().Handler())
	defer srv.Close()
	if rep, _ := status.Collect(t.Context(), status.Sources{Queue: memqueue.New(memqueue.Options{}), Store: memstore.New(), MetricsURL: srv.URL, Now: time.Now()}); rep.Consumer.Window != "" {
		t.Errorf("window %q from a consumer without one", rep.Consumer.Window)
	}
}
