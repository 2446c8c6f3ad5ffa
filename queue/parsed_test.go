package queue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

// What a policy's Read returns rides on the message it read, claimed or
// not, and only while the message has the body it was read from.
func TestReadAttachesWhatItReadToItsOwnMessage(t *testing.T) {
	p := queue.ClaimPolicy{Read: func(m queue.Message) (driver.ClaimRequest, any, bool) {
		s := string(m.Body)
		if s == "unclaimable" {
			return driver.ClaimRequest{}, "read " + s, false
		}
		return driver.ClaimRequest{Key: s, Token: "t"}, "read " + s, true
	}}
	msgs := []queue.Message{{ID: "1", Body: []byte("b")}, {ID: "2", Body: []byte("a")}, {ID: "3", Body: []byte("unclaimable")}, {ID: "4"}}
	claims := p.Claims(msgs)
	if len(claims) != 2 || claims[0].Index != 1 || claims[1].Index != 0 {
		t.Fatalf("claims %+v, want messages 2 and 1, in key order", claims)
	}
	for _, m := range msgs[:3] {
		if got := m.Parsed(); got != "read "+string(m.Body) {
			t.Errorf("message %s carries %v, want what was read of its own body", m.ID, got)
		}
	}
	if got := msgs[3].Parsed(); got != nil {
		t.Errorf("a message without a body carries %v", got)
	}
	swapped := msgs[0]
	swapped.Body = msgs[1].Body
	if got := swapped.Parsed(); got != nil {
		t.Errorf("a copy given another message's body carries %v, want nothing", got)
	}
	shorter := msgs[2]
	shorter.Body = shorter.Body[:5]
	if got := shorter.Parsed(); got != nil {
		t.Errorf("a copy given part of its body carries %v, want nothing", got)
	}
	if got := (queue.Message{Body: []byte("b")}).Parsed(); got != nil {
		t.Errorf("a message from another receive carries %v", got)
	}
}

func TestAClaimPolicyHasClaimOrRead(t *testing.T) {
	claim := func(queue.Message) (driver.ClaimRequest, bool) { return driver.ClaimRequest{}, false }
	read := func(queue.Message) (driver.ClaimRequest, any, bool) { return driver.ClaimRequest{}, nil, false }
	for _, tt := range []struct {
		p  queue.ClaimPolicy
		ok bool
	}{{queue.ClaimPolicy{}, false}, {queue.ClaimPolicy{Claim: claim}, true}, {queue.ClaimPolicy{Read: read}, true}, {queue.ClaimPolicy{Claim: claim, Read: read}, false}} {
		err := tt.p.Check(1)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, driver.ErrInvalid)) {
			t.Errorf("claim %v read %v: %v", tt.p.Claim != nil, tt.p.Read != nil, err)
		}
	}
}

// Attack 52s: a claim whose summary is longer than driver.MaxSummaryBytes
// is not made in the receive's transaction (the Guard refuses it when it
// claims); one of exactly the limit is.
func TestAttack52sClaimsLeaveAnOverlongSummaryToTheGuard(t *testing.T) {
	msgs := []queue.Message{{ID: "1", Body: []byte("A")}, {ID: "2", Body: []byte("B")}}
	p := queue.ClaimPolicy{Claim: func(m queue.Message) (driver.ClaimRequest, bool) {
		n := driver.MaxSummaryBytes
		if string(m.Body) == "B" {
			n++
		}
		return driver.ClaimRequest{Key: string(m.Body), Token: "t-" + m.ID, Summary: strings.Repeat("x", n)}, true
	}}
	claims := p.Claims(msgs)
	if len(claims) != 1 || claims[0].Req.Key != "A" {
		t.Fatalf("claims %+v; want only A's (its summary at the limit)", claims)
	}
}
