package queuetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// ClaimingQueue is a queue that claims in its receive's transaction.
type ClaimingQueue interface {
	queue.Queue
	queue.ClaimingReceiver
}

// ClaimingHarness opens a fresh queue (of its own name) with the store of
// its database.
type ClaimingHarness struct {
	Open func(t *testing.T, visibility time.Duration) (ClaimingQueue, driver.Store)
}

// Claiming checks what a claim riding in the queue's transactions does to
// messages and records: the claim of every message the policy reads is
// written by the receive (two copies in one receive: one owner), a result
// is recorded with its message's delete (DONE) or dead-letter (FAILED,
// with the policy's reason), a refused result leaves the message, a result
// of a delivery that was delivered again since is recorded and leaves the
// new delivery alone, and Guard.Do through it runs the work once and
// settles both copies, and a wait (WAITING) keeps its message hidden until
// the record is due, its receive count reset, so that it comes back once,
// as a first delivery, and resumes the record. (The state machine itself
// is checked row by row through the queue by queuetest.ThroughQueue.)
func Claiming(t *testing.T, h ClaimingHarness) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, ClaimingHarness)
	}{
		{"ReceiveClaimsEveryReadableMessage", testReceiveClaims},
		{"DoneDeletesFailedDeadLetters", testSettlement},
		{"RefusedResultLeavesTheMessage", testRefusedResult},
		{"ResultOfAnEarlierDeliveryLeavesTheNewOne", testStaleDelivery},
		{"GuardDoRunsOnceAndSettlesBothCopies", testGuardDo},
		{"ReleasedClaimIsTakenAtOnceByTheNextDelivery", testRelease},
		{"WaitHidesTheMessageUntilDueAndResetsItsReceiveCount", testWait},
		{"WaitOfAnEarlierDeliveryLeavesTheNewOne", testStaleWait},
		{"AMessageHeldForAWaitDoesNotAgeTheQueue", testWaitAge},
		{"AWaitLongerThanTheRetentionKeepsItsMessage", testLongWaitRetention},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

type claimBody struct {
	Key string `json:"key"`
	FP  string `json:"fp"`
}

// claimPolicy reads {"key","fp"} bodies and claims them with g; FAILED
// dead-letters with the code "debit_failed".
func claimPolicy(g *idempotency.Guard) queue.ClaimPolicy {
	return queue.ClaimPolicy{
		Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
			var b claimBody
			if json.Unmarshal(m.Body, &b) != nil || b.Key == "" {
				return driver.ClaimRequest{}, false
			}
			req, err := g.ClaimRequest(b.Key, b.FP)
			return req, err == nil
		},
		Settle: func(f driver.FinishRequest) (bool, queue.Reason) {
			if f.State == driver.StateFailed {
				return true, queue.Reason{Code: "debit_failed", Detail: f.Detail}
			}
			return false, queue.Reason{}
		},
	}
}

func openClaiming(t *testing.T, h ClaimingHarness, visibility time.Duration) (ClaimingQueue, driver.Store, *idempotency.Guard) {
	t.Helper()
	q, s := h.Open(t, visibility)
	if !q.Holds(s) {
		t.Fatal("the queue does not hold its own database's store")
	}
	if q.Holds(nil) {
		t.Fatal("the queue holds a nil store")
	}
	g, err := idempotency.NewGuard(s, idempotency.Options{Lease: time.Minute, SkewMargin: -1})
	if err != nil {
		t.Fatal(err)
	}
	return q, s, g
}

func sendClaims(t *testing.T, q queue.Queue, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := q.Send(t.Context(), []byte(b), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// receiveAll receives (claiming) until n messages are in hand.
func receiveAll(t *testing.T, q ClaimingQueue, p queue.ClaimPolicy, n int) []queue.Message {
	t.Helper()
	var got []queue.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages", len(got), n)
		}
		msgs, err := q.ReceiveClaiming(t.Context(), min(n-len(got), queue.MaxReceive), p)
		if err != nil {
			t.Fatalf("ReceiveClaiming: %v", err)
		}
		got = append(got, msgs...)
	}
	return got
}

// wantEmpty checks that q holds no message, waiting or in flight.
func wantEmpty(t *testing.T, q queue.Queue) {
	t.Helper()
	if d := depth(t, q).Counts(); d != (queue.Depth{}) {
		t.Errorf("depth %+v, want empty", d)
	}
}

// receiveOne sends one claim of key (fingerprint "f") to q and receives
// it, claimed by g.
func receiveOne(t *testing.T, q ClaimingQueue, g *idempotency.Guard, key string) queue.Message {
	t.Helper()
	sendClaims(t, q, `{"key":"`+key+`","fp":"f"}`)
	return receiveAll(t, q, claimPolicy(g), 1)[0]
}

func keyOf(t *testing.T, m queue.Message) string {
	t.Helper()
	var b claimBody
	_ = json.Unmarshal(m.Body, &b)
	return b.Key
}

func claimOf(t *testing.T, m queue.Message) idempotency.Claim {
	t.Helper()
	if m.Bound == nil {
		t.Fatalf("message %s (%s) carries no claim", m.ID, m.Body)
	}
	req, res, ok := m.Bound.Claimed()
	if !ok {
		t.Fatalf("message %s: its claim was taken already", m.ID)
	}
	if _, _, again := m.Bound.Claimed(); again {
		t.Fatalf("message %s: the claim is handed out twice", m.ID)
	}
	return idempotency.ClaimOf(req, res)
}

func testReceiveClaims(t *testing.T, h ClaimingHarness) {
	q, s, g := openClaiming(t, h, time.Minute)
	sendClaims(t, q, `{"key":"A/1.x","fp":"f"}`, `{"key":"A/1.x","fp":"f"}`, `not a claim`, `{"key":"B","fp":"f"}`, `{"key":"C","fp":"other"}`)
	// C is DONE already under another fingerprint: a conflict.
	c, err := g.Claim(t.Context(), "C", "f")
	if err != nil || c.Outcome != idempotency.Acquired {
		t.Fatalf("claim C: %v %v", c.Outcome, err)
	}
	if err := g.Complete(t.Context(), c.Lease(), "DEBITED", "ref"); err != nil {
		t.Fatal(err)
	}
	msgs := receiveAll(t, q, claimPolicy(g), 5)
	outcomes := map[string][]idempotency.Outcome{}
	for _, m := range msgs {
		if string(m.Body) == "not a claim" {
			if m.Bound != nil {
				t.Errorf("a message the policy cannot read carries a claim")
			}
			continue
		}
		outcomes[keyOf(t, m)] = append(outcomes[keyOf(t, m)], claimOf(t, m).Outcome)
	}
	a := outcomes["A/1.x"]
	if len(a) != 2 || !((a[0] == idempotency.Acquired && a[1] == idempotency.DuplicateInProgress) || (a[1] == idempotency.Acquired && a[0] == idempotency.DuplicateInProgress)) {
		t.Errorf("two copies of A in one receive: %v, want one acquired, one in progress", a)
	}
	if b := outcomes["B"]; len(b) != 1 || b[0] != idempotency.Acquired {
		t.Errorf("B: %v, want acquired", b)
	}
	if c := outcomes["C"]; len(c) != 1 || c[0] != idempotency.Conflict {
		t.Errorf("C: %v, want conflict", c)
	}
	// The claims are in the store, as a store call would have left them.
	rec, err := s.Get(t.Context(), "B", g.Now())
	if err != nil || rec.State != driver.StateInProgress || rec.Attempt != 1 {
		t.Errorf("record of B: %+v %v, want IN_PROGRESS attempt 1", rec, err)
	}
}

func testSettlement(t *testing.T, h ClaimingHarness) {
	q, s, g := openClaiming(t, h, time.Minute)
	p := claimPolicy(g)
	sendClaims(t, q, `{"key":"done","fp":"f"}`, `{"key":"failed","fp":"f"}`)
	msgs := receiveAll(t, q, p, 2)
	for _, m := range msgs {
		c := claimOf(t, m)
		req, err := finishReq(g, c, keyOf(t, m) == "failed")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Bound.Finish(t.Context(), req); err != nil {
			t.Fatalf("finish %s: %v", keyOf(t, m), err)
		}
		if !m.Bound.Settled() {
			t.Errorf("%s: result recorded, message not settled", keyOf(t, m))
		}
		// A retry of the finish (an answer lost) is still a success.
		if err := m.Bound.Finish(t.Context(), req); err != nil {
			t.Errorf("finish %s again: %v, want nil (landed)", keyOf(t, m), err)
		}
	}
	for key, want := range map[string]driver.State{"done": driver.StateDone, "failed": driver.StateFailed} {
		if rec, err := s.Get(t.Context(), key, g.Now()); err != nil || rec.State != want {
			t.Errorf("record %s: %+v %v, want %s", key, rec, err, want)
		}
	}
	if d := depth(t, q).Counts(); d != (queue.Depth{DLQ: 1}) {
		t.Errorf("depth %+v, want only the failed one, on the DLQ", d)
	}
	var entries []queue.DLQEntry
	if _, err := q.Redrive(t.Context(), queue.RedriveOptions{DryRun: true, Visit: func(e queue.DLQEntry, _ queue.RedriveDecision) {
		entries = append(entries, e)
	}}); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Reason.Code != "debit_failed" || string(entries[0].Body) != `{"key":"failed","fp":"f"}` {
		t.Errorf("DLQ entries %+v, want the failed message with code debit_failed", entries)
	}
}

func finishReq(g *idempotency.Guard, c idempotency.Claim, failed bool) (driver.FinishRequest, error) {
	l := c.Lease()
	now := g.Now()
	f := driver.FinishRequest{Key: l.Key, Token: l.Token, State: driver.StateDone, Status: "DEBITED", Detail: "ref-1",
		Now: now, ExpiresAt: now.Add(24 * time.Hour)}
	if failed {
		f.State, f.Status, f.Detail = driver.StateFailed, "FAILED", "debit declined: DECLINED"
	}
	if l.Key == "" {
		return f, errors.New("no lease")
	}
	return f, nil
}

func testRefusedResult(t *testing.T, h ClaimingHarness) {
	q, s, g := openClaiming(t, h, time.Minute)
	m := receiveOne(t, q, g, "taken")
	c := claimOf(t, m)
	// Another worker took the claim over after the lease (its clock later).
	late := c.Record.LeaseUntil.Add(time.Second)
	res, err := s.Claim(t.Context(), driver.ClaimRequest{Key: "taken", Token: "the-new-owner", Fingerprint: "f", Now: late,
		LeaseExpiredBy: late, LeaseUntil: late.Add(time.Minute), ExpiresAt: late.Add(24 * time.Hour)})
	if err != nil || !res.Acquired {
		t.Fatalf("reclaim: %+v %v", res, err)
	}
	req, _ := finishReq(g, c, false)
	if err := m.Bound.Finish(t.Context(), req); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("finish under a lost lease: %v, want ErrLeaseLost", err)
	}
	if m.Bound.Settled() {
		t.Error("a refused result settled its message")
	}
	if d := depth(t, q).Counts(); d != (queue.Depth{InFlight: 1}) {
		t.Errorf("depth %+v, want the message still there (in flight)", d)
	}
	if rec, _ := s.Get(t.Context(), "taken", late); rec.State != driver.StateInProgress || rec.Token != "the-new-owner" {
		t.Errorf("record %+v, want the new owner's claim untouched", rec)
	}
}

func testStaleDelivery(t *testing.T, h ClaimingHarness) {
	q, s, g := openClaiming(t, h, time.Second)
	first := receiveOne(t, q, g, "again")
	c := claimOf(t, first)
	// Its visibility lapses; the message is delivered again (no claim).
	second := deliveredAgain(t, q)
	req, _ := finishReq(g, c, false)
	if err := first.Bound.Finish(t.Context(), req); err != nil {
		t.Fatalf("finish of the first delivery: %v, want nil (the result is recorded)", err)
	}
	if first.Bound.Settled() {
		t.Error("the first delivery's result settled the second delivery")
	}
	if rec, err := s.Get(t.Context(), "again", g.Now()); err != nil || rec.State != driver.StateDone {
		t.Errorf("record %+v %v, want DONE", rec, err)
	}
	if err := q.Ack(t.Context(), second); err != nil {
		t.Errorf("ack of the second delivery: %v", err)
	}
	wantEmpty(t, q)
}

// deliveredAgain receives from q until the message whose visibility
// lapsed is delivered again (10 s at most).
func deliveredAgain(t *testing.T, q ClaimingQueue) []queue.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the message was not delivered again")
		}
		second, err := q.Receive(t.Context(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(second) > 0 {
			return second
		}
	}
}

// testGuardDo is the consumer's own use: Guard.Do with the delivery's
// bound claim runs the work once, records DONE with the first copy's
// delete, and answers the second copy from the record (which the consumer
// then acks).
func testGuardDo(t *testing.T, h ClaimingHarness) {
	q, s, g := openClaiming(t, h, time.Minute)
	first := receiveOne(t, q, g, "once")
	runs := 0
	work := func(context.Context, idempotency.Run) (idempotency.Done, error) {
		runs++
		return idempotency.Done{Status: "DEBITED", Detail: "ref-1"}, nil
	}
	res, err := g.Do(t.Context(), "once", "f", work, idempotency.DoOptions{Bound: first.Bound})
	if err != nil || res.Outcome != idempotency.Acquired {
		t.Fatalf("Do: %v %v, want acquired", res.Outcome, err)
	}
	if !first.Bound.Settled() {
		t.Error("DONE recorded, message not deleted with it")
	}
	second := receiveOne(t, q, g, "once")
	res, err = g.Do(t.Context(), "once", "f", work, idempotency.DoOptions{Bound: second.Bound})
	if err != nil || res.Outcome != idempotency.DuplicateDone || res.Done.Detail != "ref-1" {
		t.Fatalf("Do of the copy: %+v %v, want duplicate done with the stored result", res, err)
	}
	if runs != 1 {
		t.Errorf("work ran %d times, want once", runs)
	}
	if err := q.Ack(t.Context(), []queue.Message{second}); err != nil {
		t.Fatal(err)
	}
	wantEmpty(t, q)
	if rec, err := s.Get(t.Context(), "once", g.Now()); err != nil || rec.State != driver.StateDone || rec.Detail != "ref-1" {
		t.Errorf("record %+v %v, want DONE ref-1", rec, err)
	}
}

// testRelease: a message handed back unhandled (shutdown) gives its claim
// up, so the next delivery reclaims at once; a claim the Guard took is not
// given up by a Release.
func testRelease(t *testing.T, h ClaimingHarness) {
	q, s, g := openClaiming(t, h, time.Minute)
	p := claimPolicy(g)
	sendClaims(t, q, `{"key":"handed-back","fp":"f"}`, `{"key":"in-use","fp":"f"}`)
	var back, inUse queue.Message
	for _, m := range receiveAll(t, q, p, 2) {
		if keyOf(t, m) == "in-use" {
			inUse = m
		} else {
			back = m
		}
	}
	if c := claimOf(t, inUse); c.Outcome != idempotency.Acquired {
		t.Fatalf("in-use: %v", c.Outcome)
	}
	if err := inUse.Bound.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := back.Bound.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := back.Bound.Claimed(); ok {
		t.Error("a released claim is still handed out")
	}
	for _, m := range []queue.Message{back, inUse} {
		if err := q.ChangeVisibility(t.Context(), m, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]idempotency.Outcome{}
	for _, m := range receiveAll(t, q, p, 2) {
		got[keyOf(t, m)] = claimOf(t, m).Outcome
	}
	if got["handed-back"] != idempotency.Reclaimed || got["in-use"] != idempotency.DuplicateInProgress {
		t.Errorf("next deliveries: %v; want handed-back reclaimed at once, in-use still held", got)
	}
	if rec, err := s.Get(t.Context(), "handed-back", g.Now()); err != nil || rec.Attempt != 2 {
		t.Errorf("record %+v %v, want attempt 2", rec, err)
	}
}

// testWait: work that returns *idempotency.Wait records WAITING in the
// transaction that settles its message: the message is kept, hidden until
// the record is due — longer than the queue's visibility timeout, so it is
// the wait that hides it — with its receive count reset (a wait never
// moves a message toward the DLQ), and the runtime has nothing left to
// send. It then comes back once, as a first delivery, and its claim
// resumes the record.
func testWait(t *testing.T, h ClaimingHarness) {
	ctx := t.Context()
	q, s, g := openClaiming(t, h, time.Second)
	p := claimPolicy(g)
	first := receiveOne(t, q, g, "later")
	until := g.Now().Add(2500 * time.Millisecond)
	var runs []idempotency.Run
	work := func(_ context.Context, r idempotency.Run) (idempotency.Done, error) {
		runs = append(runs, r)
		if len(runs) == 1 {
			return idempotency.Done{}, &idempotency.Wait{Until: until, Status: "RETRY_SCHEDULED", Detail: "after INSUFFICIENT_FUNDS", NextGeneration: true}
		}
		return idempotency.Done{Status: "DEBITED", Detail: "ref-2"}, nil
	}
	time.Sleep(20 * time.Millisecond) // the wait is recorded later than the send, by the clock of created
	res, err := g.Do(ctx, "later", "f", work, idempotency.DoOptions{Bound: first.Bound})
	if err != nil || res.Outcome != idempotency.Waiting {
		t.Fatalf("Do: %v %v, want waiting", res.Outcome, err)
	}
	if !first.Bound.Settled() {
		t.Error("the wait was recorded, its message not settled with it (the runtime would still send a visibility change)")
	}
	if rec, err := s.Get(ctx, "later", g.Now()); err != nil || rec.State != driver.StateWaiting || !rec.LeaseUntil.Equal(until) || rec.Generation != 2 {
		t.Fatalf("record %+v %v, want WAITING until %v under generation 2", rec, err, until)
	}
	if d := depth(t, q).Counts(); d != (queue.Depth{InFlight: 1}) {
		t.Errorf("depth %+v, want the message kept, hidden (in flight)", d)
	}
	// The wait spent the delivery's receipt: a late visibility change from
	// it (a heartbeat) cannot cut the wait short.
	if err := q.ChangeVisibility(ctx, first, 0); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Errorf("visibility change with the waiting delivery's receipt: %v, want ErrStaleReceipt", err)
	}
	// Not delivered before its time: a receive that returns a message
	// before until has failed; the first one that returns at or after it
	// brings the message back.
	var again []queue.Message
	deadline := until.Add(10 * time.Second)
	for len(again) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the message did not come back after its wait")
		}
		msgs, err := q.ReceiveClaiming(ctx, queue.MaxReceive, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 && time.Now().Before(until) {
			t.Fatalf("the message came back at %v, before the record is due (%v): receive count %d", time.Now(), until, msgs[0].ReceiveCount)
		}
		again = msgs
	}
	if len(again) != 1 || again[0].ReceiveCount != 1 {
		t.Fatalf("after the wait: %d messages, receive count %d; want the message once, receive count 1", len(again), again[0].ReceiveCount)
	}
	second := again[0]
	// The wait restarted the message's retention (its created time), as
	// a copy would on SQS: a wait longer than the queue's retention does
	// not lose the charge to the sweep of messages past it.
	if !first.SentAt.IsZero() && !second.SentAt.After(first.SentAt) {
		t.Errorf("after the wait the message was created at %v, as first sent (%v): its retention did not restart", second.SentAt, first.SentAt)
	}
	res, err = g.Do(ctx, "later", "f", work, idempotency.DoOptions{Bound: second.Bound})
	if err != nil || res.Outcome != idempotency.Acquired || res.Attempt != 2 {
		t.Fatalf("Do after the wait: %v attempt %d %v, want acquired (resumed, not reclaimed), attempt 2", res.Outcome, res.Attempt, err)
	}
	if len(runs) != 2 || runs[1].Reclaimed || runs[1].Generation != 2 {
		t.Errorf("runs %+v, want two, the second under generation 2, not a reclaim", runs)
	}
	if !second.Bound.Settled() {
		t.Error("DONE recorded, message not deleted with it")
	}
	if rec, err := s.Get(ctx, "later", g.Now()); err != nil || rec.State != driver.StateDone || rec.Attempt != 2 || rec.Detail != "ref-2" {
		t.Errorf("record %+v %v, want DONE ref-2, attempt 2", rec, err)
	}
	wantEmpty(t, q)
}

// testStaleWait: a wait recorded through a delivery that was delivered
// again since (its visibility lapsed) is recorded, and leaves the new
// delivery alone, as a result does (testStaleDelivery).
func testStaleWait(t *testing.T, h ClaimingHarness) {
	ctx := t.Context()
	q, s, g := openClaiming(t, h, time.Second)
	first := receiveOne(t, q, g, "wait-again")
	c := claimOf(t, first)
	second := deliveredAgain(t, q)
	now := g.Now()
	f := driver.FinishRequest{Key: "wait-again", Token: c.Lease().Token, State: driver.StateWaiting, Status: "RETRY_SCHEDULED",
		Now: now, ExpiresAt: now.Add(24 * time.Hour), NotBefore: now.Add(time.Hour)}
	if err := first.Bound.Finish(ctx, f); err != nil {
		t.Fatalf("wait through the first delivery: %v, want nil (the wait is recorded)", err)
	}
	if first.Bound.Settled() {
		t.Error("the first delivery's wait settled the second delivery")
	}
	if rec, err := s.Get(ctx, "wait-again", g.Now()); err != nil || rec.State != driver.StateWaiting {
		t.Errorf("record %+v %v, want WAITING", rec, err)
	}
	if err := q.Ack(ctx, second); err != nil {
		t.Errorf("ack of the second delivery: %v (the wait must leave it alone)", err)
	}
	wantEmpty(t, q)
}

// testWaitAge: a message held for its record's wait (notice-first holds
// every charge for its lead, a retry for a day) is not a message waiting
// to be handled: the queue's oldest message age (the gauge
// OldestMessageWaitingLong alerts on after an hour: "month-end backlog or
// a stalled consumer") is that of the messages to handle and in hand, not
// of the ones held until their time.
func testWaitAge(t *testing.T, h ClaimingHarness) {
	ctx := t.Context()
	q, _, g := openClaiming(t, h, time.Second)
	m := receiveOne(t, q, g, "held")
	res, err := g.Do(ctx, "held", "f", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, &idempotency.Wait{Until: g.Now().Add(time.Hour), Status: "NOTICE_SENT"}
	}, idempotency.DoOptions{Bound: m.Bound})
	if err != nil || res.Outcome != idempotency.Waiting || !m.Bound.Settled() {
		t.Fatalf("Do: %v %v (settled %v), want the wait recorded with its message", res.Outcome, err, m.Bound.Settled())
	}
	time.Sleep(1500 * time.Millisecond) // the wait goes on
	sendClaims(t, q, `{"key":"fresh","fp":"f"}`)
	d := depth(t, q)
	if !d.OldestKnown {
		t.Skip("this queue cannot tell the oldest message's age")
	}
	if d.OldestAge >= time.Second {
		t.Errorf("oldest message age %v with one message just sent and one held for its wait: the wait ages the queue (an hour into every wait, OldestMessageWaitingLong fires)", d.OldestAge)
	}
}

// expirer is a queue that deletes its messages past retention (the SQL
// queues: serve's sweep calls it).
type expirer interface {
	Expire(ctx context.Context, now time.Time, limit int) (main, dlq int, err error)
}

// testLongWaitRetention: a wait longer than the queue's message retention
// (4 days by default): --notice-lead 14d, the SEPA lead the issue names, or
// a retry delay of a week. The held message must be there when the record
// comes due, or the charge is lost (its record WAITING, nothing to resume
// it). The sweep deleted it once the retention had passed since the wait
// began, hidden or not.
func testLongWaitRetention(t *testing.T, h ClaimingHarness) {
	ctx := t.Context()
	q, _, g := openClaiming(t, h, time.Second)
	ex, ok := q.(expirer)
	if !ok {
		t.Skip("this queue does not expire messages itself")
	}
	p := claimPolicy(g)
	sendClaims(t, q, `{"key":"sepa","fp":"f"}`)
	m := receiveAll(t, q, p, 1)[0]
	const lead = 14 * 24 * time.Hour
	res, err := g.Do(ctx, "sepa", "f", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{}, &idempotency.Wait{Until: g.Now().Add(lead), Status: "NOTICE_SENT"}
	}, idempotency.DoOptions{Bound: m.Bound})
	if err != nil || res.Outcome != idempotency.Waiting || !m.Bound.Settled() {
		t.Fatalf("Do: %v %v (settled %v), want the wait recorded with its message", res.Outcome, err, m.Bound.Settled())
	}
	// The sweep runs through the wait, a day at a time (the queue's
	// retention is its default, 4 days).
	for day := time.Duration(1); day < 14; day++ {
		if main, _, err := ex.Expire(ctx, time.Now().Add(day*24*time.Hour), 100); err != nil || main != 0 {
			t.Fatalf("day %d of a %s wait: the sweep deleted %d message(s) (%v): the charge's message is gone while its record waits", day, lead, main, err)
		}
	}
	if d := depth(t, q).Counts(); d != (queue.Depth{InFlight: 1}) {
		t.Fatalf("depth %+v after 13 days of sweeps, want the held message", d)
	}
}
