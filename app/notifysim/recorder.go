// Package notifysim is the simulated pre-debit notification channel
// (--notify sim): Recorder records every notification (and every advance
// notice of notice-first mode, counted by its key), logs it with the
// account masked, and can inject failures. For the demo and the tests only;
// the production channels are notify (a log line), awssns and webhook.
package notifysim

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
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

// Advance is one advance notice (notice-first mode) the recorder accepted.
type Advance struct {
	Key            string // the notice's NotificationKey
	ChargeID       string
	Account        string // masked
	Amount         string
	DebitOnOrAfter time.Time
	Text           string
}

// Recorder implements charge.Notifier and charge.AdvanceNotifier.
type Recorder struct {
	mu       sync.Mutex
	sent     []Sent
	advances []Advance
	byKey    map[string]int
	failRate float64
	rng      *rand.Rand
	log      *slog.Logger
}

var (
	_ charge.Notifier        = (*Recorder)(nil)
	_ charge.NoticeSender    = (*Recorder)(nil)
	_ charge.AdvanceNotifier = (*Recorder)(nil)
)

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

// NotifyAdvance implements charge.AdvanceNotifier: the notice is recorded
// (and counted by its key: a re-send after a crash is a second count under
// the same key), or fails as often as the failure rate says.
func (r *Recorder) NotifyAdvance(ctx context.Context, n charge.AdvanceNotice) error {
	r.mu.Lock()
	fail := r.failRate > 0 && r.rng.Float64() < r.failRate
	if !fail {
		r.advances = append(r.advances, Advance{Key: n.NotificationKey, ChargeID: n.ChargeID, Account: n.Account,
			Amount: charge.Money{Minor: n.Amount.Minor, Currency: n.Amount.Currency}.String(), DebitOnOrAfter: n.DebitOnOrAfter, Text: n.Text})
		if r.byKey == nil {
			r.byKey = map[string]int{}
		}
		r.byKey[n.NotificationKey]++
	}
	r.mu.Unlock()
	if fail {
		return ErrInjected
	}
	if r.log != nil {
		r.log.LogAttrs(ctx, slog.LevelDebug, "advance notice sent", slog.String("notification_key", n.NotificationKey),
			slog.String("account", n.Account), slog.String("text", n.Text))
	}
	return nil
}

// Advances returns every advance notice accepted, in order.
func (r *Recorder) Advances() []Advance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Advance(nil), r.advances...)
}

// AdvanceCount is how many times an advance notice was accepted under key:
// more than one is a re-send the channel recognises by its key.
func (r *Recorder) AdvanceCount(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKey[key]
}

// Sent returns every notification sent.
func (r *Recorder) Sent() []Sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sent(nil), r.sent...)
}
