package queue_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

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

// Stored attributes of any shape read as strings, or as none: never an
// error that would hold the message (and every message behind it) back.
func TestDecodeAttributesReadsAnyColumn(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want map[string]string
	}{
		{``, nil},
		{`{"origin":"batch-7"}`, map[string]string{"origin": "batch-7"}},
		{`{"origin":7,"ok":true,"n":null,"o":{"a":1}}`, map[string]string{"origin": "7", "ok": "true", "n": "", "o": `{"a":1}`}},
		{`["not","an","object"]`, nil},
		{`not json`, nil},
		{`{}`, nil},
	} {
		if got := queue.DecodeAttributes([]byte(tc.raw)); !maps.Equal(got, tc.want) {
			t.Errorf("DecodeAttributes(%s) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestCheckWaitWithinQueue(t *testing.T) {
	const h = time.Hour
	step := 11*h + 40*time.Minute
	for _, tc := range []struct {
		name        string
		waits       []time.Duration
		retention   time.Duration
		maxReceives int
		resetsAge   bool
		bad         string // a word of the error; "" for none
	}{
		{"no wait", nil, 96 * h, 10, false, ""},
		{"72h×3 with jitter keeps its age past 96h", []time.Duration{79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second, 79*h + 12*time.Minute + time.Second}, 96 * h, 10, false, "delete it by age"},
		{"72h×3 within a 14-day retention spends 22 receives", []time.Duration{79 * h, 79 * h, 79 * h}, 14 * 24 * h, 10, false, "22 receives"},
		{"72h×3 fits 14 days and 30 receives", []time.Duration{79 * h, 79 * h, 79 * h}, 14 * 24 * h, 30, false, ""},
		{"12h×2 fits 96h and 10 receives", []time.Duration{13*h + 13*time.Minute, 13*h + 13*time.Minute}, 96 * h, 10, false, ""},
		{"just at the retention", []time.Duration{48 * h, 48 * h}, 96 * h, 0, false, "delete it by age"},
		{"no redrive policy: no receive limit", []time.Duration{90 * h}, 96 * h, 0, false, ""},
		{"exactly the receives", []time.Duration{9 * step}, 14 * 24 * h, 10, false, ""},
		{"one receive over", []time.Duration{9*step + time.Second}, 14 * 24 * h, 10, false, "11 receives"},
		{"a notice lead alone", []time.Duration{100 * h}, 96 * h, 10, false, "delete it by age"},
		{"serve starts the message over: 72h×3 on 96h", []time.Duration{79 * h, 79 * h, 79 * h}, 96 * h, 10, true, ""},
		{"serve: a hide longer than the retention", []time.Duration{79 * h}, 6 * h, 10, true, "deleted by age while hidden"},
		{"serve: a short wait on a short retention", []time.Duration{time.Hour}, 6 * h, 10, true, ""},
		{"serve: maxReceiveCount 1", []time.Duration{79 * h}, 96 * h, 1, true, "second receive"},
	} {
		err := queue.CheckWaitWithinQueue(tc.waits, tc.retention, tc.maxReceives, step, tc.resetsAge)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.bad)
		}
	}
}
