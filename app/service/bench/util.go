package bench

import (
	"context"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// benchLedger is a compact core-banking simulator for N charges whose ids
// end in their index: 4 bytes per charge, so that the bench's memory shows
// the consumer's, not the simulator's. It honours the idempotency key like
// corebanksim.Ledger (a repeat replays, posts nothing) and counts requests that
// arrive after a debit was confirmed.
type benchLedger struct {
	latency time.Duration
	// loadLatency is added per debit in flight when a debit starts: a bank
	// that slows down under load.
	loadLatency time.Duration
	inflight    atomic.Int64
	// sentAt, when set (the month-end mode), is each charge's send time in
	// Unix nanoseconds; toDebit gets the wait from it to the charge's first
	// posting.
	sentAt  []atomic.Int64
	toDebit histogram
	state   []atomic.Uint32 // bit 0 posted, bits 1.. requests after confirmation
	calls   atomic.Int64
	// wrong counts debits whose account, amount, type or narrative is not
	// their charge's (another charge's payload under this charge's key).
	wrong atomic.Int64
}

func newBenchLedger(n int, latency time.Duration) *benchLedger {
	return &benchLedger{latency: latency, state: make([]atomic.Uint32, n)}
}

func benchIndex(id string) int {
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[i+1:])
	if err != nil {
		return -1
	}
	return n
}

func (l *benchLedger) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	l.calls.Add(1)
	n := l.inflight.Add(1)
	defer l.inflight.Add(-1)
	if wait := l.latency + time.Duration(n-1)*l.loadLatency; wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return charge.DebitReceipt{}, ctx.Err()
		}
	}
	i := benchIndex(req.IdempotencyKey)
	if i < 0 || i >= len(l.state) {
		return charge.DebitReceipt{}, charge.Permanent(&charge.DeclineError{Code: "UNKNOWN_CHARGE"})
	}
	if w := benchCharge("", i).DebitRequest(); req.AccountID != w.AccountID || req.Amount != w.Amount || req.ChargeType != w.ChargeType || req.Narrative != w.Narrative {
		l.wrong.Add(1)
	}
	for {
		old := l.state[i].Load()
		next := old | 1
		if old&1 != 0 {
			next = old + 2 // a replay of a confirmed debit
		}
		if l.state[i].CompareAndSwap(old, next) {
			if old&1 == 0 && l.sentAt != nil {
				if at := l.sentAt[i].Load(); at > 0 {
					l.toDebit.add(time.Since(time.Unix(0, at)))
				}
			}
			break
		}
	}
	return charge.DebitReceipt{Reference: "B" + strconv.Itoa(i)}, nil
}

// verify counts charges debited once, double-debited, and not debited.
func (l *benchLedger) verify() (once, double, none int) {
	for i := range l.state {
		s := l.state[i].Load()
		switch {
		case s&1 == 0:
			none++
		case s>>1 > 0:
			double++
		default:
			once++
		}
	}
	return
}

type nopNotifier struct{}

func (nopNotifier) NotifyPreDebit(context.Context, charge.Charge, charge.DebitReceipt) error {
	return nil
}

// histogram is a fixed-size log-bucketed latency histogram (2% buckets
// from 1µs), so recording a million samples costs no more memory than ten.
type histogram struct {
	mu     sync.Mutex
	counts [1200]int64
	n      int64
	max    time.Duration
}

const histGrowth = 1.02

func (h *histogram) add(d time.Duration) {
	us := max(float64(d.Microseconds()), 1)
	i := min(int(math.Log(us)/math.Log(histGrowth)), len(h.counts)-1)
	h.mu.Lock()
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
	h.mu.Unlock()
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(math.Pow(histGrowth, float64(i+1)))*time.Microsecond, h.max)
		}
	}
	return h.max
}

// memSampler records the peak Go heap in use and the process's peak RSS.
type memSampler struct {
	peakHeap atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
}

func startMemSampler() *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > m.peakHeap.Load() {
				m.peakHeap.Store(ms.HeapInuse)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memSampler) finish() (heapMB, rssMB float64) {
	close(m.stop)
	<-m.done
	return float64(m.peakHeap.Load()) / (1 << 20), peakRSSMB()
}

// peakRSSMB reads VmHWM (peak resident set) from /proc (Linux); 0 elsewhere.
func peakRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}
