package status_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
