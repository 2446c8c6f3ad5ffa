package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

var _ queue.ClaimingReceiver = (*Queue)(nil)

// Holds implements queue.ClaimingReceiver: s is a Store on this queue's
// database.
func (q *Queue) Holds(s driver.Store) bool {
	st, ok := s.(*Store)
	return ok && st.db == q.db
}

// ReceiveClaiming implements queue.ClaimingReceiver: the receive and every
// claim are one write of the group commit (claimTx, the store's own claim),
// and each message's result is recorded in the write that deletes or
// dead-letters it (bound.Finish).
func (q *Queue) ReceiveClaiming(ctx context.Context, max int, p queue.ClaimPolicy) ([]queue.Message, error) {
	if err := p.Check(max); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return queue.Poll(ctx, q.opts.WaitTime, q.opts.PollInterval, func() ([]queue.Message, error) { return q.receiveOnce(ctx, max, &p) })
}

// claimAll writes the claims of msgs in tx, in key order (as every
// claiming transaction does), and binds each message to its claim. Two
// copies of one charge in one batch: the second sees the first's claim.
func (q *Queue) claimAll(ctx context.Context, tx *wtx, msgs []queue.Message, p queue.ClaimPolicy) error {
	claims := p.Claims(msgs)
	for _, c := range claims {
		res, err := claimTx(ctx, tx, c.Req)
		if err != nil {
			return fmt.Errorf("claim %s: %w", c.Req.Key, err)
		}
		m := msgs[c.Index]
		msgs[c.Index].Bound = &bound{ClaimedAtReceive: driver.NewClaimedAtReceive(&Store{db: q.db}, c.Req, res), q: q, p: p, m: m,
			margin: queue.SkewMarginOf(c.Req)}
	}
	return nil
}

// bound is a message received with its claim (driver.Bound): the claim
// as every store keeps it, and this queue's Finish.
type bound struct {
	*driver.ClaimedAtReceive
	q *Queue
	p queue.ClaimPolicy
	m queue.Message // as received, without its Bound
	// margin is the claim's skew margin: a WAITING record is claimable
	// that long after its not-before.
	margin time.Duration
}

// Finish writes the result and the message's settlement in one write of
// the group commit: the store's finish (finishTx), then, only if the record
// is ours in its final state, the delete or the dead-letter forward of this
// delivery, or for WAITING the message kept but hidden until the record is
// due, its receive count reset (nothing, when the message was delivered
// again since).
func (b *bound) Finish(ctx context.Context, f driver.FinishRequest) error {
	if !f.Valid() {
		return fmt.Errorf("%w: finish to state %q (not-before %v)", driver.ErrInvalid, f.State, f.NotBefore)
	}
	deadLetter, reason := b.p.Settlement(f)
	var visibleAt time.Time
	if f.State == driver.StateWaiting {
		visibleAt = time.Now().UTC().Add(queue.WaitVisibility(f, b.margin))
	}
	var ok, settled bool
	err := b.q.db.write(ctx, func(tx *wtx) error {
		var err error
		if ok, err = finishTx(ctx, tx, f); err != nil || !ok {
			return err
		}
		if f.State == driver.StateWaiting {
			settled, err = b.q.hold(ctx, tx, b.m, visibleAt)
			return err
		}
		settled, err = b.q.settle(ctx, tx, b.m, deadLetter, reason)
		return err
	})
	if err == nil && settled { // only what committed
		b.SetSettled()
	}
	return finishAnswer(ok, err)
}

// settle deletes m, or forwards it to the DLQ, in tx if its receipt is
// still its latest delivery, and reports whether it did.
func (q *Queue) settle(ctx context.Context, tx *wtx, m queue.Message, deadLetter bool, reason queue.Reason) (bool, error) {
	id, count, err := parseReceipt(m.Receipt)
	if err != nil {
		return false, nil
	}
	if deadLetter {
		return q.forward(ctx, tx, m, reason)
	}
	res, err := tx.Exec(ctx, `delete from goqite where queue = ? and id = ? and received = ?`, q.opts.Name, id, count)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// hold keeps m on the queue but hidden until visibleAt, with its receive
// count reset to 0 (a wait never moves a message toward the DLQ), in tx,
// if its receipt is still its latest delivery, and reports whether it is
// held so. A message already held (received 0: nobody received it since
// the wait that landed, this delivery's own) keeps its time.
func (q *Queue) hold(ctx context.Context, tx *wtx, m queue.Message, visibleAt time.Time) (bool, error) {
	id, count, err := parseReceipt(m.Receipt)
	if err != nil {
		return false, nil
	}
	// The wait restarts the message's retention too (created), from when
	// it is due (as a copy sent then would be on SQS), so that a wait
	// longer than the queue's retention (a 14-day notice lead) does not
	// lose the charge to Expire while it is held.
	at := visibleAt.Format(timeFormat)
	res, err := tx.Exec(ctx, `update goqite set timeout = case when received = 0 then timeout else ? end,
		created = case when received = 0 then created else ? end, received = 0
		where queue = ? and id = ? and received in (?, 0)`, at, at, q.opts.Name, id, count)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
