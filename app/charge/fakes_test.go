package charge_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// ledger is a fake core-banking system that honours the idempotency key the
// way the real one must: a repeat of a key returns the first receipt and
// posts nothing.
type ledger struct {
	mu      sync.Mutex
	entries map[string]charge.DebitRequest // by idempotency key
	calls   map[string]int
	// fail, when set, decides the answer to a call before it posts.
	fail func(req charge.DebitRequest, call int) error
	// gate, when set, is waited on (or the ctx) before answering.
	gate chan struct{}
	// entered is signalled (non-blocking) when a call starts.
	entered chan string
}

func newLedger() *ledger {
	return &ledger{entries: map[string]charge.DebitRequest{}, calls: map[string]int{}}
}

func (l *ledger) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	l.mu.Lock()
	l.calls[req.IdempotencyKey]++
	call := l.calls[req.IdempotencyKey]
	fail, gate, entered := l.fail, l.gate, l.entered
	l.mu.Unlock()
	if entered != nil {
		select {
		case entered <- req.IdempotencyKey:
		default:
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return charge.DebitReceipt{}, ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(req, call); err != nil {
			return charge.DebitReceipt{}, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[req.IdempotencyKey]; !ok {
		l.entries[req.IdempotencyKey] = req
	}
	return charge.DebitReceipt{Reference: "TXN-" + req.IdempotencyKey}, nil
}

func (l *ledger) posted(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[key]; ok {
		return 1
	}
	return 0
}

func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

func (l *ledger) callsFor(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[key]
}

// notifier records notifications; err, when set, fails every one.
type notifier struct {
	mu   sync.Mutex
	sent []string
	err  error
}

func (n *notifier) NotifyPreDebit(_ context.Context, c charge.Charge, r charge.DebitReceipt) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	n.sent = append(n.sent, fmt.Sprintf("%s:%s", c.ID, r.Reference))
	return nil
}

func (n *notifier) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.sent)
}

// heartbeat captures the registered beat so a test can fire it.
type heartbeat struct {
	mu    sync.Mutex
	beats []func(context.Context) error
}

func (h *heartbeat) Register(beat func(context.Context) error) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beats = append(h.beats, beat)
	i := len(h.beats) - 1
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.beats[i] = nil
	}
}

func (h *heartbeat) fire(ctx context.Context) []error {
	h.mu.Lock()
	beats := append([]func(context.Context) error(nil), h.beats...)
	h.mu.Unlock()
	var errs []error
	for _, b := range beats {
		if b != nil {
			errs = append(errs, b(ctx))
		}
	}
	return errs
}
