// Package notifysim is the simulated pre-debit notification channel
// (--notify sim): Recorder records every notification, logs it with the
// account masked, and can inject failures. For the demo and the tests only;
// the production channels are notify (a log line), awssns and webhook.
package notifysim

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"

	"github.com/finedge/idempotent-consumer/charge"
)

// ErrInjected is the failure the recorder injects.
var ErrInjected = errors.New("notify: injected notification failure")

// Sent is one notification.
type Sent struct {
	ChargeID  string
	Account   string // masked
	Amount    string
	Reference string
}

// Recorder implements charge.Notifier.
type Recorder struct {
	mu       sync.Mutex
	sent     []Sent
	failRate float64
	rng      *rand.Rand
	log      *slog.Logger
}

var _ charge.Notifier = (*Recorder)(nil)

// NewRecorder returns a recorder that fails failRate (0-1) of notifications
// and logs to log (nil: no logging).
func NewRecorder(failRate float64, log *slog.Logger) *Recorder {
	return &Recorder{failRate: failRate, rng: rand.New(rand.NewPCG(3, 4)), log: log}
}

// NotifyPreDebit implements charge.Notifier.
func (r *Recorder) NotifyPreDebit(ctx context.Context, c charge.Charge, receipt charge.DebitReceipt) error {
	r.mu.Lock()
	fail := r.failRate > 0 && r.rng.Float64() < r.failRate
	if !fail {
		r.sent = append(r.sent, Sent{ChargeID: c.ID, Account: charge.MaskAccount(c.AccountID), Amount: c.Amount.String(), Reference: receipt.Reference})
	}
	r.mu.Unlock()
	if fail {
		return ErrInjected
	}
	if r.log != nil {
		r.log.LogAttrs(ctx, slog.LevelDebug, "pre-debit notification sent", slog.Any("charge", c), slog.String("reference", receipt.Reference))
	}
	return nil
}

// SendNotice implements charge.NoticeSender (renotify with --notify sim).
func (r *Recorder) SendNotice(_ context.Context, n charge.Notice) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, Sent{ChargeID: n.ChargeID, Account: n.Account,
		Amount: charge.Money{Minor: n.Amount.Minor, Currency: n.Amount.Currency}.String(), Reference: n.Reference})
	return nil
}

// Sent returns every notification sent.
func (r *Recorder) Sent() []Sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sent(nil), r.sent...)
}
