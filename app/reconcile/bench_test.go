package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// BenchmarkReconcile1M reconciles a camt.053 of 1,000,000 postings
// (generated through a pipe, never held whole) against 1,000,000 DONE
// DONE records, every posting's amount checked against its record's keyed
// fingerprint, and reports the peak heap of the run (sampled every
// millisecond with runtime/metrics: heap objects and the unused part of
// the heap's spans, garbage not yet collected included) and postings
// reconciled per second. Run it once:
//
//	go test -run x -bench Reconcile1M -benchtime 1x ./reconcile
func BenchmarkReconcile1M(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 20_000
	}
	fp, err := idempotency.NewFingerprinter([]byte("bench-fingerprint-key-0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	start := day.Add(9 * time.Hour)
	mk := func(i int) charge.Charge {
		return charge.Charge{ID: fmt.Sprintf("CHG-%07d", i), AccountID: fmt.Sprintf("00%010d", i), Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: day}
	}
	// The records come from a store that makes them from their key as it
	// is asked (no memory of its own), so the heap measured is the
	// reconciliation's alone.
	s := &madeStore{n: n, record: func(i int) driver.Record {
		c := mk(i)
		return driver.Record{Key: c.ID, State: driver.StateDone, Status: "DEBITED", Detail: "REF", Token: "t", Attempt: 1, Generation: 1,
			Fingerprint: c.Fingerprint(fp), CreatedAt: start, UpdatedAt: start, ExpiresAt: start.Add(30 * 24 * time.Hour)}
	}}
	ctx := b.Context()
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	heap := func() uint64 {
		metrics.Read(samples)
		return samples[0].Value.Uint64() + samples[1].Value.Uint64()
	}
	for b.Loop() {
		runtime.GC()
		base := heap()
		var peak atomic.Uint64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if h := heap(); h > peak.Load() {
						peak.Store(h)
					}
				}
			}
		}()
		began := time.Now()
		read := func(fn func(statement.Posting) error) (statement.Period, error) {
			pr, pw := io.Pipe()
			go func() {
				pw.CloseWithError(statement.WriteCamt053Seq(pw, statement.StatementInfo{ID: "BIG", Account: "FEES-001", Created: start, Period: period},
					func(yield func(statement.Posting) bool) {
						for i := range n {
							c := mk(i)
							req := c.DebitRequest()
							if !yield(statement.Posting{BankKey: req.IdempotencyKey, Account: c.AccountID, Amount: c.Amount, BookingDate: day,
								Reference: fmt.Sprintf("BNK-%d", i), Narrative: req.Narrative}) {
								return
							}
						}
					}))
			}()
			h, err := statement.Read(pr, "big.xml", statement.Options{CollectionAccount: "FEES-001"}, fn)
			pr.Close()
			return h.Period, err
		}
		rep, err := reconcile.Run(ctx, reconcile.Options{Store: s, Fingerprints: fp, Now: start.Add(time.Hour)}, read)
		took := time.Since(began)
		close(stop)
		<-done
		if err != nil {
			b.Fatal(err)
		}
		if rep.Postings != n || rep.Matched != n || rep.Unverified != 0 || len(rep.Breaks) != 0 {
			b.Fatalf("postings %d matched %d unverified %d breaks %d, want %d matched, every amount checked, none broken", rep.Postings, rep.Matched, rep.Unverified, len(rep.Breaks), n)
		}
		b.ReportMetric(float64(peak.Load()-min(base, peak.Load()))/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(n)/took.Seconds(), "postings/s")
	}
}

// madeStore is a read-only store of n DONE records made from their keys
// ("CHG-%07d") when asked: Get and a walk of them, nothing kept.
type madeStore struct {
	n      int
	record func(i int) driver.Record
}

var _ driver.UpdatedWalker = (*madeStore)(nil)

func (m *madeStore) Get(_ context.Context, key string, _ time.Time) (driver.Record, error) {
	var i int
	if _, err := fmt.Sscanf(key, "CHG-%07d", &i); err != nil || i < 0 || i >= m.n || fmt.Sprintf("CHG-%07d", i) != key {
		return driver.Record{}, driver.ErrNotFound
	}
	return m.record(i), nil
}

func (m *madeStore) WalkUpdated(_ context.Context, req driver.WalkRequest, fn func(driver.Record) error) error {
	for i := range m.n {
		if r := m.record(i); req.Walked(r) {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *madeStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimResult, error) {
	return driver.ClaimResult{}, errors.New("read-only")
}
func (m *madeStore) Finish(context.Context, driver.FinishRequest) error {
	return errors.New("read-only")
}
func (m *madeStore) Extend(context.Context, driver.ExtendRequest) error {
	return errors.New("read-only")
}
func (m *madeStore) Reopen(context.Context, driver.ReopenRequest) (driver.Record, error) {
	return driver.Record{}, errors.New("read-only")
}
