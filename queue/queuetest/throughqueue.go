package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/idempotency/storetest"
	"github.com/finedge/idempotent-consumer/queue"
)

// ThroughQueue is s with every Claim and Finish made the way a consumer of
// q makes them: a claim is a message sent to q and received by
// ReceiveClaiming, which writes the claim in the receive's transaction;
// a finish of a claim made so goes through the message's Bound, in the
// transaction that deletes the message. Run and Linearizable on it check
// the co-located path against the very state machine the store's own
// calls implement. A claim the receive left to the caller (Bound nil, or
// no claim in it) is made with s.Claim, as the Guard would. q must be
// used by nothing else; give it a long visibility timeout (a claimed
// message stays in flight until its finish) and a short wait.
func ThroughQueue(q ClaimingQueue, s driver.Store) driver.Store {
	t := &throughQueue{Store: s, q: q, answers: map[string]claimAnswer{}, bound: map[string]driver.Bound{}, answered: map[string]bool{}}
	t.policy = queue.ClaimPolicy{Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
		var e claimEnvelope
		if err := json.Unmarshal(m.Body, &e); err != nil || t.wasAnswered(e.Nonce) {
			return driver.ClaimRequest{}, false
		}
		return e.Req, true
	}}
	if ops, ok := s.(operatorStore); ok {
		return throughQueueOps{t, ops} // the operators' capabilities are the store's own
	}
	return t
}

// ConformanceThroughQueue runs storetest.Conformance on s through q
// (ThroughQueue), and checks that (nearly) every claim was answered in a
// receive: the path it meant to check was taken.
func ConformanceThroughQueue(t *testing.T, q ClaimingQueue, s driver.Store) {
	t.Helper()
	through := ThroughQueue(q, s)
	storetest.Conformance(t, through)
	in, byCall := ClaimsThroughQueue(through)
	if in == 0 || byCall*10 > in+byCall {
		t.Errorf("claims answered in a receive: %d, by a store call: %d; want (nearly) all in a receive", in, byCall)
	}
}

// operatorStore is a store with every optional capability of the driver.
type operatorStore interface {
	driver.StuckLister
	driver.Purger
	driver.StateCounter
	driver.Amender
	driver.Collector
	driver.ResultLister
	driver.StateLister
}

type throughQueueOps struct {
	*throughQueue
	operatorStore
}

type throughQueue struct {
	driver.Store
	q      ClaimingQueue
	policy queue.ClaimPolicy

	mu      sync.Mutex
	answers map[string]claimAnswer  // by the claim's nonce, for whoever sent it
	bound   map[string]driver.Bound // by key and token: the message of a claim acquired
	// answered holds the nonces of the claims answered: a message back
	// from a wait (a WAITING finish keeps it, hidden until the record is
	// due) is a claim made already, not one to make again.
	answered map[string]bool
	// How the claims were answered: in the receive, or left to a store call.
	inReceive, byCall int
}

// ClaimsThroughQueue says how many claims a ThroughQueue store had answered
// in a receive's transaction and how many the receive left to a store call
// (a test checks the path it meant to check was taken).
func ClaimsThroughQueue(s driver.Store) (inReceive, byCall int) {
	t, ok := s.(*throughQueue)
	if o, isOps := s.(throughQueueOps); isOps {
		t, ok = o.throughQueue, true
	}
	if !ok {
		return 0, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inReceive, t.byCall
}

// errNotSettled: a result was recorded through its message, but the
// message was not deleted with it (or was, with a refused result).
var errNotSettled = errors.New("storetest: the message's settlement does not match the result")

type claimEnvelope struct {
	Nonce string              `json:"nonce"`
	Req   driver.ClaimRequest `json:"req"`
}

type claimAnswer struct {
	res driver.ClaimResult
	err error
}

func boundKey(key, token string) string { return key + "\x00" + token }

// Claim sends the claim as a message and receives until its answer is
// there: received by this call or by a concurrent one.
func (t *throughQueue) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimResult, error) {
	if req.Key == "" || req.Token == "" {
		return driver.ClaimResult{}, fmt.Errorf("%w: claim needs key and token", driver.ErrInvalid)
	}
	e := claimEnvelope{Nonce: rand.Text(), Req: req}
	body, err := json.Marshal(e)
	if err != nil {
		return driver.ClaimResult{}, err
	}
	if _, err := t.q.Send(ctx, body, nil); err != nil {
		return driver.ClaimResult{}, driver.Unavailable("claim: send", err)
	}
	for {
		t.mu.Lock()
		a, ok := t.answers[e.Nonce]
		delete(t.answers, e.Nonce)
		t.mu.Unlock()
		if ok {
			return a.res, a.err
		}
		if err := ctx.Err(); err != nil {
			return driver.ClaimResult{}, err
		}
		msgs, err := t.q.ReceiveClaiming(ctx, queue.MaxReceive, t.policy)
		if err != nil {
			// Nothing of this receive was written: the message comes back.
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return driver.ClaimResult{}, err
			}
			continue
		}
		for _, m := range msgs {
			t.answer(ctx, m)
		}
	}
}

func (t *throughQueue) wasAnswered(nonce string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.answered[nonce]
}

// answer takes the claim a received message carries (or makes it, where
// the receive left it to the caller) and files it for its sender. A
// message whose claim was answered before (back after a wait) is acked.
func (t *throughQueue) answer(ctx context.Context, m queue.Message) {
	var e claimEnvelope
	if err := json.Unmarshal(m.Body, &e); err != nil || t.wasAnswered(e.Nonce) {
		_ = t.q.Ack(ctx, []queue.Message{m})
		return
	}
	var a claimAnswer
	var b driver.Bound
	if m.Bound != nil {
		if req, res, ok := m.Bound.Claimed(); ok && req.Token == e.Req.Token {
			a.res, b = res, m.Bound
		}
	}
	if b == nil {
		a.res, a.err = t.Store.Claim(ctx, e.Req)
	}
	t.mu.Lock()
	if b != nil {
		t.inReceive++
	} else {
		t.byCall++
	}
	if a.err == nil && a.res.Acquired && b != nil {
		t.bound[boundKey(e.Req.Key, e.Req.Token)] = b
	}
	t.answers[e.Nonce] = a
	t.answered[e.Nonce] = true
	t.mu.Unlock()
	if b == nil || a.err != nil || !a.res.Acquired {
		_ = t.q.Ack(ctx, []queue.Message{m}) // nothing to finish: the consumer would ack or retry it
	}
}

// Finish goes through the claim's message when the claim was made in a
// receive, else to the store. A recorded result must have settled its
// message (deleted, or for WAITING hidden until the record is due: nothing
// else receives from q), a refused one must not.
func (t *throughQueue) Finish(ctx context.Context, f driver.FinishRequest) error {
	t.mu.Lock()
	b := t.bound[boundKey(f.Key, f.Token)]
	t.mu.Unlock()
	if b == nil {
		return t.Store.Finish(ctx, f)
	}
	before := b.Settled()
	err := b.Finish(ctx, f)
	switch {
	case err == nil && !b.Settled():
		return fmt.Errorf("%w: %s recorded %s, its message is still on the queue", errNotSettled, f.Key, f.State)
	case errors.Is(err, driver.ErrLeaseLost) && b.Settled() && !before:
		return fmt.Errorf("%w: %s refused (%v), its message was deleted", errNotSettled, f.Key, err)
	}
	return err
}
