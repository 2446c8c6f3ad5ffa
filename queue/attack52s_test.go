package queue_test

import (
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

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
