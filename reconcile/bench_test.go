package reconcile_test

import (
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
	"github.com/finedge/idempotent-consumer/reconcile"
	"github.com/finedge/idempotent-consumer/reconcile/statement"
)

// BenchmarkReconcile1M reconciles a camt.053 of 1,000,000 postings
// (generated through a pipe, never held whole) against 1,000,000 DONE
// records in the memory store, every posting's amount checked against
// its record's keyed fingerprint, and reports the peak heap the run adds
// over the store's own (sampled every millisecond with runtime/metrics)
// and postings reconciled per second. Run it once:
//
//	go test -run x -bench Reconcile1M -benchtime 1x ./reconcile
func BenchmarkReconcile1M(b *testing.B) {
	const n = 1_000_000
	fp, err := idempotency.NewFingerprinter([]byte("bench-fingerprint-key-0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	s := memstore.New()
	ctx := b.Context()
	start := day.Add(9 * time.Hour)
	mk := func(i int) charge.Charge {
		return charge.Charge{ID: fmt.Sprintf("CHG-%07d", i), AccountID: fmt.Sprintf("00%010d", i), Amount: charge.Money{Minor: 2500, Currency: "INR"},
			Type: charge.SMSAlertFee, DueDate: day}
	}
	for i := range n {
		c := mk(i)
		req := driver.ClaimRequest{Key: c.ID, Token: "t", Fingerprint: c.Fingerprint(fp), Now: start, LeaseExpiredBy: start,
			LeaseUntil: start.Add(time.Minute), ExpiresAt: start.Add(30 * 24 * time.Hour)}
		if _, err := s.Claim(ctx, req); err != nil {
			b.Fatal(err)
		}
		if err := s.Finish(ctx, driver.FinishRequest{Key: c.ID, Token: "t", State: driver.StateDone, Status: "DEBITED", Detail: "REF",
			Now: start, ExpiresAt: start.Add(30 * 24 * time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
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
		b.ReportMetric(float64(peak.Load()-min(base, peak.Load()))/(1<<20), "peakMB-over-store")
		b.ReportMetric(float64(n)/took.Seconds(), "postings/s")
	}
}
