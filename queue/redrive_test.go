package queue_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/queue"
)

func entry(code queue.Code) queue.DLQEntry { return queue.DLQEntry{Reason: queue.Reason{Code: code}} }

func TestRedriveDecide(t *testing.T) {
	hold := []queue.Code{"conflict"}
	tests := []struct {
		name  string
		opts  queue.RedriveOptions
		code  queue.Code
		moved int
		want  queue.RedriveDecision
	}{
		{"all", queue.RedriveOptions{}, "invalid", 0, queue.Move},
		{"queue policy entry", queue.RedriveOptions{}, queue.CodeMaxReceives, 0, queue.Move},
		{"filter match", queue.RedriveOptions{Codes: []queue.Code{"debit_failed"}}, "debit_failed", 0, queue.Move},
		{"filter miss", queue.RedriveOptions{Codes: []queue.Code{"debit_failed"}}, "invalid", 0, queue.Skip},
		{"filter is exact, not a prefix", queue.RedriveOptions{Codes: []queue.Code{"debit"}}, "debit_failed", 0, queue.Skip},
		{"held back", queue.RedriveOptions{HoldBack: hold}, "conflict", 0, queue.HoldBack},
		{"held back forced", queue.RedriveOptions{HoldBack: hold, Force: true}, "conflict", 0, queue.Move},
		{"not held without HoldBack", queue.RedriveOptions{}, "conflict", 0, queue.Move},
		{"max reached", queue.RedriveOptions{Max: 2}, "invalid", 2, queue.Skip},
		{"under max", queue.RedriveOptions{Max: 2}, "invalid", 1, queue.Move},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.opts.Decide(entry(tt.code), tt.moved); got != tt.want {
				t.Errorf("%v, want %v", got, tt.want)
			}
		})
	}
}

func TestRedriveReportCounts(t *testing.T) {
	var r queue.RedriveReport
	r.Count(entry("invalid"), queue.Move)
	r.Count(entry(queue.CodeMaxReceives), queue.Move)
	r.Count(entry("conflict"), queue.HoldBack)
	r.Count(entry("x"), queue.Skip)
	if r.Seen != 4 || r.Moved != 2 || r.HeldBack != 1 || r.Skipped != 1 || r.ByCode["invalid"] != 1 || r.ByCode[queue.CodeMaxReceives] != 1 ||
		r.SeenByCode["conflict"] != 1 {
		t.Fatalf("report = %+v", r)
	}
}

func TestOldEntriesAreHeldBackUnlessForced(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	o := queue.RedriveOptions{MaxAge: 29 * 24 * time.Hour, Now: now}
	at := func(age time.Duration) queue.DLQEntry {
		e := entry("debit_failed")
		if age > 0 {
			e.At = now.Add(-age)
		}
		return e
	}
	old, young, unknown := at(30*24*time.Hour), at(28*24*time.Hour), at(0)
	if d := o.Decide(old, 0); d != queue.TooOld {
		t.Fatalf("30-day-old entry with a 29-day limit: %v, want TooOld", d)
	}
	if d := o.Decide(young, 0); d != queue.Move {
		t.Fatalf("28-day-old entry: %v, want Move", d)
	}
	if d := o.Decide(unknown, 0); d != queue.Move {
		t.Fatalf("entry of unknown age: %v, want Move", d)
	}
	o.Force = true
	if d := o.Decide(old, 0); d != queue.Move {
		t.Fatalf("forced: %v, want Move", d)
	}
}

func TestDeadLetterAttributesKeepOursWithinTheLimit(t *testing.T) {
	m := queue.Message{ID: "m1", ReceiveCount: 3, Attributes: map[string]string{"a": "1", "b": "2", "dlq-reason": "old"}}
	attrs := queue.DeadLetterAttributes(m, queue.Reason{Code: "invalid", Detail: string(make([]byte, 2000))}, 5)
	if attrs[queue.CodeAttribute] != "invalid" || attrs[queue.SourceIDAttribute] != "m1" || attrs[queue.ReceiveCountAttribute] != "3" {
		t.Fatalf("attrs %v", attrs)
	}
	if len(attrs[queue.DetailAttribute]) != queue.MaxDetailBytes || len(attrs) != 5 {
		t.Fatalf("detail %d bytes, %d attributes; want %d and 5", len(attrs[queue.DetailAttribute]), len(attrs), queue.MaxDetailBytes)
	}
	back := queue.OriginalAttributes(attrs)
	for k := range back {
		if k != "a" && k != "b" {
			t.Fatalf("redrive keeps %s", k)
		}
	}
	if r := queue.ReasonFromAttributes(map[string]string{}); r.Code != queue.CodeMaxReceives {
		t.Fatalf("no code attribute reads as %q", r.Code)
	}
	if got := queue.Truncate("héllo", 2); got != "h" {
		t.Fatalf("Truncate cut a rune: %q", got)
	}
}
