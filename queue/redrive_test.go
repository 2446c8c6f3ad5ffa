package queue_test

import (
	"context"
	"errors"
	"slices"
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

// fakeScan is a DLQ in pages; MoveBack records what moved, and fails for
// the ids in failOn.
type fakeScan struct {
	pages  [][]queue.DLQEntry
	moved  []string
	attrs  []map[string]string
	failOn map[string]bool
	closed bool
}

func (s *fakeScan) Next(context.Context) ([]queue.DLQEntry, error) {
	if len(s.pages) == 0 {
		return nil, nil
	}
	p := s.pages[0]
	s.pages = s.pages[1:]
	return p, nil
}

func (s *fakeScan) MoveBack(_ context.Context, e queue.DLQEntry, attrs map[string]string) error {
	if s.failOn[e.ID] {
		return errors.New("injected")
	}
	s.moved = append(s.moved, e.ID)
	s.attrs = append(s.attrs, attrs)
	return nil
}

func (s *fakeScan) Close() { s.closed = true }

func dlqEntry(id string, code queue.Code, at time.Time) queue.DLQEntry {
	return queue.DLQEntry{ID: id, Reason: queue.Reason{Code: code}, At: at,
		Attributes: map[string]string{"origin": "batch-1", queue.CodeAttribute: string(code)}}
}

// The one redrive loop every queue runs: decisions across pages, Max,
// Before, the dry run, a too-large entry, a failed move, and Close always.
func TestRedriveLoop(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	pages := func() [][]queue.DLQEntry {
		return [][]queue.DLQEntry{
			{dlqEntry("1", "debit_failed", t0), dlqEntry("2", "conflict", t0)},
			{dlqEntry("3", "debit_failed", t0.Add(time.Minute)), dlqEntry("4", "invalid", t0.Add(2*time.Hour))},
		}
	}
	hold := []queue.Code{"conflict"}
	tests := []struct {
		name      string
		pages     [][]queue.DLQEntry
		opts      queue.RedriveOptions
		failOn    map[string]bool
		wantMoved []string
		wantSeen  int
		wantErr   error
	}{
		{"all but the held back, across pages", pages(), queue.RedriveOptions{HoldBack: hold}, nil, []string{"1", "3", "4"}, 4, nil},
		{"max", pages(), queue.RedriveOptions{Max: 2, HoldBack: hold}, nil, []string{"1", "3"}, 4, nil},
		{"dry run moves nothing", pages(), queue.RedriveOptions{DryRun: true}, nil, nil, 4, nil},
		{"dead-lettered after the start is left alone", pages(), queue.RedriveOptions{Before: t0.Add(time.Hour), HoldBack: hold}, nil, []string{"1", "3"}, 3, nil},
		{"a failed move stops the run", pages(), queue.RedriveOptions{}, map[string]bool{"2": true}, []string{"1"}, 1, errors.New("injected")},
		{"too large is read by a dry run, counted as unmovable", [][]queue.DLQEntry{{tooLarge("9"), dlqEntry("1", "debit_failed", t0)}},
			queue.RedriveOptions{DryRun: true}, nil, nil, 2, nil},
		{"too large is not moved, the rest is, and the run says so", [][]queue.DLQEntry{{tooLarge("9"), dlqEntry("1", "debit_failed", t0)}, {tooLarge("8")}},
			queue.RedriveOptions{}, nil, []string{"1"}, 3, queue.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scan := &fakeScan{pages: tt.pages, failOn: tt.failOn}
			rep, err := queue.Redrive(t.Context(), scan, tt.opts)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Redrive: %v", err)
			case tt.wantErr != nil && (err == nil || !errors.Is(err, tt.wantErr) && err.Error() != tt.wantErr.Error()):
				t.Fatalf("Redrive: err = %v, want %v", err, tt.wantErr)
			}
			reported := len(tt.wantMoved)
			big := 0
			for _, p := range tt.pages {
				for _, e := range p {
					if e.TooLarge {
						big++
					}
				}
			}
			if tt.opts.DryRun {
				reported = tt.wantSeen - big // a dry run reports what would move
			}
			if big > 0 && (rep.Unmovable != big || len(rep.UnmovableIDs) != big) {
				t.Errorf("report: %d unmovable (%v), want the %d over the limit", rep.Unmovable, rep.UnmovableIDs, big)
			}
			if !slices.Equal(scan.moved, tt.wantMoved) || rep.Moved != reported || rep.Seen != tt.wantSeen {
				t.Errorf("moved %v (report: %d moved, %d seen), want %v and %d seen", scan.moved, rep.Moved, rep.Seen, tt.wantMoved, tt.wantSeen)
			}
			for _, a := range scan.attrs {
				if a["origin"] != "batch-1" || a[queue.CodeAttribute] != "" {
					t.Errorf("moved with attributes %v, want the original ones without the dead-letter ones", a)
				}
			}
			if !scan.closed {
				t.Error("the scan was not closed")
			}
		})
	}
}

func tooLarge(id string) queue.DLQEntry {
	return queue.DLQEntry{ID: id, Reason: queue.Reason{Code: queue.CodeTooLarge}, TooLarge: true, Size: queue.MaxMessageBytes + 1}
}

// partialScan is a DLQScan of pages that may fail in Next and reports
// (as a PartialScan) entries it could not see; it counts its Close calls.
type partialScan struct {
	pages   [][]queue.DLQEntry
	nextErr error // returned by Next once the pages are out
	unseen  int
	closed  int
}

func (s *partialScan) Next(context.Context) ([]queue.DLQEntry, error) {
	if len(s.pages) == 0 {
		return nil, s.nextErr
	}
	p := s.pages[0]
	s.pages = s.pages[1:]
	return p, nil
}

func (s *partialScan) MoveBack(context.Context, queue.DLQEntry, map[string]string) error { return nil }
func (s *partialScan) Close()                                                            { s.closed++ }
func (s *partialScan) Unseen() (int, bool)                                               { return s.unseen, true }

// Redrive closes its scan once also when Next fails or a Visit panics (a
// scan holding SQS messages gives them back only at Close), and reports
// what a PartialScan could not see (the failed moves and too-large entries
// are in TestRedriveLoop).
func TestRedriveClosesThePartialScanAndReportsUnseen(t *testing.T) {
	boom := errors.New("boom")
	page := []queue.DLQEntry{{ID: "a", Reason: queue.Reason{Code: "invalid"}}, {ID: "b", Reason: queue.Reason{Code: "invalid"}}}
	tests := []struct {
		name       string
		scan       *partialScan
		opts       queue.RedriveOptions
		panics     bool
		wantErr    error
		wantUnseen int
	}{
		{"every entry seen", &partialScan{pages: [][]queue.DLQEntry{page}}, queue.RedriveOptions{}, false, nil, 0},
		{"short of the DLQ", &partialScan{pages: [][]queue.DLQEntry{page}, unseen: 3}, queue.RedriveOptions{DryRun: true}, false, nil, 3},
		{"Next fails", &partialScan{pages: [][]queue.DLQEntry{page}, nextErr: boom, unseen: 3}, queue.RedriveOptions{DryRun: true}, false, boom, 0},
		{"Visit panics", &partialScan{pages: [][]queue.DLQEntry{page}}, queue.RedriveOptions{DryRun: true, Visit: func(queue.DLQEntry, queue.RedriveDecision) { panic("visit") }}, true, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rep queue.RedriveReport
			var err error
			func() {
				defer func() {
					if r := recover(); (r != nil) != tt.panics {
						t.Errorf("panic %v, want one: %v", r, tt.panics)
					}
				}()
				rep, err = queue.Redrive(t.Context(), tt.scan, tt.opts)
			}()
			if tt.scan.closed != 1 {
				t.Errorf("scan closed %d times, want once", tt.scan.closed)
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("err %v, want %v", err, tt.wantErr)
			}
			if rep.Unseen != tt.wantUnseen || rep.Approximate != (tt.wantUnseen > 0) {
				t.Errorf("unseen %d (approximate %v), want %d", rep.Unseen, rep.Approximate, tt.wantUnseen)
			}
		})
	}
}
