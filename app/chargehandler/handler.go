// Package chargehandler is the inbound adapter of charge recovery: it turns one
// queue delivery into one call of charge.Service and the service's Outcome
// into the runtime's ack decision (the design's outcome → ack table). It
// parses, delegates, maps and logs; it holds no business logic.
package chargehandler

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// Options configure a Handler.
type Options struct {
	// Service runs the charge. Required.
	Service *charge.Service
	// Logger gets one structured line per decision. Default slog.Default().
	Logger *slog.Logger
	// InProgressMargin is added to the rest of a live lease before a
	// DUPLICATE_IN_PROGRESS message is seen again, so it comes back just
	// after the lease could have expired. Default 1s.
	InProgressMargin time.Duration
	// OnResult, when set, is called with every result and the delivery's
	// context (metrics, tracing, tests).
	OnResult func(ctx context.Context, m queue.Message, c charge.Charge, r charge.Result)
}

// Handler implements consumer.Handler for ChargeDueEvent messages.
type Handler struct {
	opts Options
}

var _ consumer.Handler = (*Handler)(nil)

// NewHandler returns a Handler; it panics on a nil Service (a wiring bug).
func NewHandler(opts Options) *Handler {
	if opts.Service == nil {
		panic("chargehandler: NewHandler needs a Service")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.InProgressMargin == 0 {
		opts.InProgressMargin = time.Second
	}
	return &Handler{opts: opts}
}

// Handle implements consumer.Handler.
func (h *Handler) Handle(ctx context.Context, d *consumer.Delivery) consumer.Decision {
	start := time.Now()
	c, err := h.read(d.Message)
	var res charge.Result
	if err != nil {
		res = charge.InvalidResult(err)
	} else {
		res = h.opts.Service.ProcessDelivery(ctx, c, charge.Delivery{Heartbeat: d, Bound: d.Bound})
	}
	dec := Decide(res, h.opts.InProgressMargin)
	h.log(ctx, d.Message, c, res, dec, time.Since(start))
	if h.opts.OnResult != nil {
		h.opts.OnResult(ctx, d.Message, c, res)
	}
	return dec
}

// parseEvent is charge.ParseEvent (a test counts its calls).
var parseEvent = charge.ParseEvent

// read is the charge in m: the one its claiming receive parsed
// (ClaimPolicy's Read, m.Parsed), else parsed from its body now (every
// other receive, and a body the policy could not read, which fails here
// again with its reason).
func (h *Handler) read(m queue.Message) (charge.Charge, error) {
	if p, ok := m.Parsed().(*parsedCharge); ok {
		return p.c, nil
	}
	return parseEvent(m.Body)
}

// parsedCharge is what ClaimPolicy's Read attaches to a message it parsed
// (queue.Message.Parsed): a pointer, so that the receive stores it without
// copying the charge again.
type parsedCharge struct{ c charge.Charge }

// ClaimPolicy is how a queue that shares the idempotency store's database
// claims ChargeDueEvents in its receive's transaction
// (queue.ClaimingReceiver): the claim the service would write for a
// message that parses (one that does not is left to Handle, which
// dead-letters it unclaimed), the charge it parsed carried on the message
// so that Handle does not parse it again (queue.Message.Parsed), and the
// settlement of a recorded result by
// Actions: DONE is a processed charge (ack), FAILED a declined one
// (dead-letter, with the reason Handle would give), WAITING a waiting one
// (not dead-lettered; the reason is the wait's).
func (h *Handler) ClaimPolicy() queue.ClaimPolicy {
	return queue.ClaimPolicy{
		Read: func(m queue.Message) (driver.ClaimRequest, any, bool) {
			c, err := parseEvent(m.Body)
			if err != nil {
				return driver.ClaimRequest{}, nil, false
			}
			req, err := h.opts.Service.ClaimRequest(c)
			return req, &parsedCharge{c}, err == nil
		},
		Settle: func(f driver.FinishRequest) (bool, queue.Reason) {
			res := charge.Result{Outcome: charge.Processed}
			switch f.State {
			case driver.StateFailed:
				res = charge.Result{Outcome: charge.DebitFailed, Reason: f.Detail}
			case driver.StateWaiting:
				res = charge.Result{Outcome: charge.Waiting, Status: charge.Status(f.Status), Reason: f.Detail, NotBefore: f.NotBefore}
			}
			dec := Decide(res, h.opts.InProgressMargin)
			return dec.Action == consumer.DeadLetter, dec.Reason
		},
	}
}

// Actions is the design's outcome → ack table, the only one: what the
// runtime does with a message for each outcome. An outcome missing here is
// retried (never acked).
var Actions = map[charge.Outcome]consumer.Action{
	charge.Processed:           consumer.Ack,        // debited and recorded DONE
	charge.DuplicateDone:       consumer.Ack,        // an earlier delivery did it
	charge.DebitFailed:         consumer.DeadLetter, // declined, recorded FAILED
	charge.DuplicateFailed:     consumer.DeadLetter, // an earlier delivery recorded FAILED
	charge.Conflict:            consumer.DeadLetter, // id reused with another payload: alert
	charge.Invalid:             consumer.DeadLetter, // not a ChargeDueEvent: never debited
	charge.RetryLater:          consumer.Retry,      // transient: nothing final recorded
	charge.DuplicateInProgress: consumer.Retry,      // another delivery holds the lease
	charge.LeaseLost:           consumer.Retry,      // the new owner finishes
	charge.Waiting:             consumer.Wait,       // handled again at NotBefore: never toward the DLQ
}

// WaitCodes are the reason codes of a Waiting charge, by what it waits for
// (its Status); any other status waits with CodeWaiting.
var WaitCodes = map[charge.Status]queue.Code{
	charge.RetryScheduled: "retry_scheduled", // declined; the next attempt is scheduled
	charge.NoticeSent:     "notice_lead",     // the advance notice went out; the debit waits for its lead
}

// CodeWaiting is the reason code of a wait WaitCodes does not name.
const CodeWaiting queue.Code = "waiting"

// Code is the reason code a message carries to the DLQ (or logs, on a
// retry) for an outcome: its name ("invalid", "conflict", "debit_failed",
// "duplicate_failed" on the DLQ). A wait's code is by its status
// (WaitCodes): see Decide.
func Code(o charge.Outcome) queue.Code { return queue.Code(o.String()) }

// waitCode is the reason code of a wait for status.
func waitCode(status charge.Status) queue.Code {
	if c, ok := WaitCodes[status]; ok {
		return c
	}
	return CodeWaiting
}

// DLQCodes are every reason code a DLQ entry may carry: the outcomes that
// dead-letter, and the queue's own (max_receives, too_large); sorted.
func DLQCodes() []queue.Code {
	codes := []queue.Code{queue.CodeMaxReceives, queue.CodeTooLarge}
	for o, a := range Actions {
		if a == consumer.DeadLetter {
			codes = append(codes, Code(o))
		}
	}
	slices.Sort(codes)
	return codes
}

// HoldBack are the DLQ codes a redrive moves only when forced: a charge id
// reused with another payload needs a person, not a retry.
var HoldBack = []queue.Code{Code(charge.Conflict), queue.CodeTooLarge}

// Decide maps a charge result to the runtime's decision, by Actions. The
// reason carries the outcome's code, so that metrics and redrive read a
// field, not text.
func Decide(res charge.Result, inProgressMargin time.Duration) consumer.Decision {
	action, ok := Actions[res.Outcome]
	if !ok {
		action = consumer.Retry
	}
	reason := queue.Reason{Code: Code(res.Outcome), Detail: res.Reason}
	switch action {
	case consumer.Ack:
		return consumer.Decision{Action: consumer.Ack}
	case consumer.DeadLetter:
		return consumer.Decision{Action: consumer.DeadLetter, Reason: reason}
	case consumer.Wait:
		reason.Code = waitCode(res.Status)
		return consumer.Decision{Action: consumer.Wait, Until: res.NotBefore, Reason: reason}
	}
	dec := consumer.Decision{Action: consumer.Retry, Reason: reason}
	if res.Outcome == charge.DuplicateInProgress || res.RetryAfter > 0 {
		// Come back just after the lease could have passed: a live claim
		// (ours, kept after an answer that may have posted, or another
		// delivery's) makes an earlier return a wasted receive.
		dec.RetryAfter = max(res.RetryAfter, 0) + inProgressMargin
	}
	return dec
}

func (h *Handler) log(ctx context.Context, m queue.Message, c charge.Charge, res charge.Result, dec consumer.Decision, took time.Duration) {
	level, msg := describe(res.Outcome)
	if res.Alert {
		level = slog.LevelError
	}
	if !h.opts.Logger.Enabled(ctx, level) {
		return // build nothing on the hot path for a line nobody keeps
	}
	attrs := []slog.Attr{
		slog.String("message_id", m.ID),
		slog.Int("receive_count", m.ReceiveCount),
		slog.String("outcome", res.Outcome.String()),
		slog.String("action", dec.Action.String()),
		slog.Float64("latency_ms", float64(took.Microseconds())/1000),
	}
	if c.ID != "" {
		attrs = append(attrs, slog.Any("charge", c), slog.Int("attempt", res.Attempt))
	}
	if res.Status != "" {
		attrs = append(attrs, slog.String("status", string(res.Status)))
	}
	if res.Reference != "" {
		attrs = append(attrs, slog.String("reference", res.Reference))
	}
	if res.Reason != "" {
		attrs = append(attrs, slog.String("reason", res.Reason))
	}
	if dec.RetryAfter > 0 {
		attrs = append(attrs, slog.String("retry_after", dec.RetryAfter.Round(time.Millisecond).String()))
	}
	if dec.Action == consumer.Wait {
		attrs = append(attrs, slog.Time("until", dec.Until), slog.String("wait", string(dec.Reason.Code)))
	}
	switch res.Outcome {
	case charge.DuplicateDone, charge.DuplicateFailed, charge.DuplicateInProgress:
		attrs = append(attrs, slog.Bool("audit", true))
	case charge.Conflict:
		attrs = append(attrs, slog.Bool("alert", true))
	}
	if res.Alert {
		level, msg = slog.LevelError, "ALERT: core banking rejected our request as wrong or unauthorised; nothing recorded, left for redelivery"
		attrs = append(attrs, slog.Bool("alert", true))
	}
	h.opts.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// describe gives the level and message of the decision line for an outcome.
func describe(o charge.Outcome) (slog.Level, string) {
	if d, ok := decisionLines[o]; ok {
		return d.level, d.msg
	}
	return slog.LevelInfo, "charge processed"
}

// decisionLines are the level and message of each outcome's decision line
// but Processed's.
var decisionLines = map[charge.Outcome]struct {
	level slog.Level
	msg   string
}{
	charge.DuplicateDone:       {slog.LevelInfo, "duplicate delivery dropped"},
	charge.DuplicateFailed:     {slog.LevelInfo, "duplicate delivery dropped"},
	charge.DuplicateInProgress: {slog.LevelInfo, "duplicate delivery while another holds the claim; left for redelivery"},
	charge.DebitFailed:         {slog.LevelWarn, "debit declined; recorded FAILED and dead-lettered"},
	charge.Invalid:             {slog.LevelWarn, "malformed message dead-lettered; nothing debited"},
	charge.Conflict:            {slog.LevelError, "ALERT: charge id reused with a different payload; dead-lettered, nothing debited"},
	charge.RetryLater:          {slog.LevelWarn, "transient failure; left for redelivery"},
	charge.LeaseLost:           {slog.LevelWarn, "lease lost to another worker; not acked"},
	charge.Waiting:             {slog.LevelInfo, "charge waiting; handled again at its time"},
}
