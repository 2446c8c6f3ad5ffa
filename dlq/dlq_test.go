package dlq_test

import (
	"testing"

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
