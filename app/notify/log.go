// Package notify is the pre-debit notification channel that needs no
// outside dependency: Log, one structured line per notice, for banks that
// produce customer notifications downstream from logs (--notify log). The
// other production channels are packages of their own (awssns, webhook);
// the simulator is notifysim.
package notify

import (
	"context"
	"log/slog"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// Log is a production notification channel for banks whose customer
// notifications are produced downstream from logs: one structured line
// per notice (charge.Notice, account masked) at INFO, message
// "pre-debit notice", attribute "notice"; an advance notice
// (charge.AdvanceNotice, notice-first mode) likewise, message "advance
// notice". It never fails.
type Log struct {
	log *slog.Logger
	now func() time.Time
}

var (
	_ charge.Notifier        = (*Log)(nil)
	_ charge.NoticeSender    = (*Log)(nil)
	_ charge.AdvanceNotifier = (*Log)(nil)
)

// NewLog returns a Log notifier writing to log (nil: slog.Default()).
func NewLog(log *slog.Logger) *Log {
	if log == nil {
		log = slog.Default()
	}
	return &Log{log: log, now: time.Now}
}

// NotifyPreDebit implements charge.Notifier.
func (l *Log) NotifyPreDebit(ctx context.Context, c charge.Charge, receipt charge.DebitReceipt) error {
	return l.SendNotice(ctx, charge.NoticeOf(c, receipt, l.now()))
}

// SendNotice implements charge.NoticeSender.
func (l *Log) SendNotice(ctx context.Context, n charge.Notice) error {
	l.log.LogAttrs(ctx, slog.LevelInfo, "pre-debit notice", slog.Group("notice", append(noticeAttrs(n.Type, n.NotificationKey, n.ChargeID, n.Account, n.Amount, n.ChargeType, n.DueDate),
		slog.String("reference", n.Reference), slog.Time("debitedAt", n.DebitedAt))...))
	return nil
}

// NotifyAdvance implements charge.AdvanceNotifier: one line, message
// "advance notice", attribute "notice" (the AdvanceNotice's fields).
func (l *Log) NotifyAdvance(ctx context.Context, n charge.AdvanceNotice) error {
	l.log.LogAttrs(ctx, slog.LevelInfo, "advance notice", slog.Group("notice", append(noticeAttrs(n.Type, n.NotificationKey, n.ChargeID, n.Account, n.Amount, n.ChargeType, n.DueDate),
		slog.Time("debitOnOrAfter", n.DebitOnOrAfter), slog.String("text", n.Text))...))
	return nil
}

// noticeAttrs are the attributes the two notices share, in the order the
// line gives them.
func noticeAttrs(typ, key, chargeID, account string, amt charge.NoticeAmt, chargeType charge.Type, dueDate string) []any {
	return []any{slog.String("type", typ), slog.String("notificationKey", key), slog.String("chargeId", chargeID),
		slog.String("account", account), slog.Int64("amountMinor", amt.Minor), slog.String("currency", string(amt.Currency)),
		slog.String("chargeType", string(chargeType)), slog.String("dueDate", dueDate)}
}
