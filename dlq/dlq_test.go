package dlq_test

import (
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/dlq"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		opts   dlq.Options
		reason string
		moved  int
		want   dlq.Decision
	}{
		{"all", dlq.Options{}, "invalid: x", 0, dlq.Move},
		{"queue policy entry", dlq.Options{}, "", 0, dlq.Move},
		{"filter match", dlq.Options{ReasonPrefix: "debit_failed"}, "debit_failed: declined", 0, dlq.Move},
		{"filter miss", dlq.Options{ReasonPrefix: "debit_failed"}, "invalid: x", 0, dlq.Skip},
		{"conflict held back", dlq.Options{}, "conflict: reused", 0, dlq.HoldBack},
		{"conflict forced", dlq.Options{Force: true}, "conflict: reused", 0, dlq.Move},
		{"max reached", dlq.Options{Max: 2}, "invalid: x", 2, dlq.Skip},
		{"under max", dlq.Options{Max: 2}, "invalid: x", 1, dlq.Move},
	}
	for _, tt := range tests {
		if got := tt.opts.Decide(dlq.Entry{Reason: tt.reason}, tt.moved); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestReportCounts(t *testing.T) {
	var r dlq.Report
	r.Count(dlq.Entry{Reason: "invalid: a"}, dlq.Move)
	r.Count(dlq.Entry{Reason: ""}, dlq.Move)
	r.Count(dlq.Entry{Reason: "conflict: b"}, dlq.HoldBack)
	r.Count(dlq.Entry{Reason: "x"}, dlq.Skip)
	if r.Seen != 4 || r.Moved != 2 || r.HeldBack != 1 || r.Skipped != 1 || r.ByReason["invalid"] != 1 || r.ByReason["(queue redrive policy)"] != 1 {
		t.Fatalf("report = %+v", r)
	}
}

func TestOldEntriesAreHeldBackUnlessForced(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	o := dlq.Options{MaxAge: 29 * 24 * time.Hour, Now: now}
	old := dlq.Entry{Reason: "debit_failed: x", At: now.Add(-30 * 24 * time.Hour)}
	young := dlq.Entry{Reason: "debit_failed: x", At: now.Add(-28 * 24 * time.Hour)}
	unknown := dlq.Entry{Reason: "debit_failed: x"}
	if d := o.Decide(old, 0); d != dlq.TooOld {
		t.Fatalf("30-day-old entry with a 29-day limit: %v, want TooOld", d)
	}
	if d := o.Decide(young, 0); d != dlq.Move {
		t.Fatalf("28-day-old entry: %v, want Move", d)
	}
	if d := o.Decide(unknown, 0); d != dlq.Move {
		t.Fatalf("entry of unknown age: %v, want Move", d)
	}
	o.Force = true
	if d := o.Decide(old, 0); d != dlq.Move {
		t.Fatalf("forced: %v, want Move", d)
	}
	var r dlq.Report
	r.Count(old, dlq.TooOld)
	if r.TooOld != 1 || r.Seen != 1 {
		t.Fatalf("report %+v", r)
	}
}
