package storetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// maxDetail is a Detail of exactly driver.MaxResultBytes bytes, with
// multi-byte runes and a marker at each end, so that a cut or a re-encoding
// shows.
func maxDetail() string {
	var b strings.Builder
	b.WriteString("<start>")
	for b.Len()+len("é€x") <= driver.MaxResultBytes-len("<end>") {
		b.WriteString("é€x")
	}
	for b.Len() < driver.MaxResultBytes-len("<end>") {
		b.WriteByte('.')
	}
	b.WriteString("<end>")
	return b.String()
}

type payment struct {
	ID    string   `json:"id"`
	Minor int64    `json:"minor"`
	Notes []string `json:"notes"`
}

// binaryCodec writes bytes that are not UTF-8 text (a NUL, 0xff).
type binaryCodec struct{}

func (binaryCodec) Name() string { return "bin" }
func (binaryCodec) Encode(v any) ([]byte, error) {
	return append([]byte{0, 0xff, 0xfe}, v.(string)...), nil
}
func (binaryCodec) Decode(data []byte, v any) error {
	rest, ok := bytes.CutPrefix(data, []byte{0, 0xff, 0xfe})
	if !ok {
		return errors.New("bad prefix")
	}
	*v.(*string) = string(rest)
	return nil
}

var resultsCases = []testCase{
	{"DetailOfMaxResultBytesKeptWhole", func(t *testing.T, e *env) {
		c := e.claim(t, fpA, idempotency.Acquired)
		detail := maxDetail()
		if len(detail) != driver.MaxResultBytes {
			t.Fatalf("test detail has %d bytes", len(detail))
		}
		now := e.clock.Now()
		err := e.s.Finish(t.Context(), driver.FinishRequest{Key: e.key, Token: c.Record.Token, State: driver.StateDone,
			Status: "RESULT json", Detail: detail, Now: now, ExpiresAt: now.Add(Retention), Claimed: &c.Record})
		if err != nil {
			t.Fatalf("Finish with a detail of %d bytes: %v", len(detail), err)
		}
		if got := e.get(t); got.Detail != detail || got.State != driver.StateDone {
			t.Fatalf("stored detail: %d bytes (want %d), equal %v, state %v", len(got.Detail), len(detail), got.Detail == detail, got.State)
		}
		dup := e.claim(t, fpA, idempotency.DuplicateDone)
		if dup.Record.Detail != detail {
			t.Fatalf("a duplicate's claim saw a detail of %d bytes, want %d", len(dup.Record.Detail), len(detail))
		}
	}},
	{"FirstResultReplayed", func(t *testing.T, e *env) {
		var runs atomic.Int32
		notes := make([]string, 0, 2000)
		for i := range 2000 {
			notes = append(notes, strings.Repeat("n", 50)+string(rune('a'+i%26)))
		}
		work := func(context.Context, idempotency.Run) (payment, error) {
			n := runs.Add(1)
			return payment{ID: "pay-" + string(rune('0'+n)), Minor: 2500, Notes: notes}, nil
		}
		first, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, idempotency.DoOptions{})
		if err != nil || first.Outcome != idempotency.Acquired || first.Replayed || first.Value.ID != "pay-1" {
			t.Fatalf("first DoTyped = %+v, %v", first.Outcome, err)
		}
		for range 2 {
			dup, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, idempotency.DoOptions{})
			if err != nil || dup.Outcome != idempotency.DuplicateDone || !dup.Replayed {
				t.Fatalf("duplicate DoTyped = %v replayed %v, %v", dup.Outcome, dup.Replayed, err)
			}
			if dup.Value.ID != "pay-1" || dup.Value.Minor != 2500 || len(dup.Value.Notes) != len(notes) || dup.Value.Notes[1999] != notes[1999] {
				t.Fatalf("replayed value differs: id %q, %d notes", dup.Value.ID, len(dup.Value.Notes))
			}
		}
		other, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpB, work, idempotency.DoOptions{})
		if !errors.Is(err, idempotency.ErrConflict) || other.Outcome != idempotency.Conflict || other.Replayed || other.Value.ID != "" {
			t.Fatalf("another fingerprint: %v replayed %v value %q, %v", other.Outcome, other.Replayed, other.Value.ID, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("work ran %d times, want 1", n)
		}
	}},
	{"TooLargeRefusedAndNotRunAgain", func(t *testing.T, e *env) {
		var runs atomic.Int32
		big := strings.Repeat("x", driver.MaxResultBytes) // + JSON quotes: past the limit
		work := func(context.Context, idempotency.Run) (string, error) { runs.Add(1); return big, nil }
		first, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, idempotency.DoOptions{})
		if !errors.Is(err, idempotency.ErrResultTooLarge) || !errors.Is(first.Err, idempotency.ErrResultTooLarge) {
			t.Fatalf("first DoTyped err = %v, want ErrResultTooLarge", err)
		}
		if first.Outcome != idempotency.Acquired || first.Value != big {
			t.Fatalf("first DoTyped = %v (value of %d bytes), want acquired with the value", first.Outcome, len(first.Value))
		}
		if r := e.get(t); r.State != driver.StateDone || len(r.Detail) > driver.MaxDetailBytes {
			t.Fatalf("record after a too-large result: state %v, detail of %d bytes", r.State, len(r.Detail))
		}
		dup, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, idempotency.DoOptions{})
		if !errors.Is(err, idempotency.ErrResultTooLarge) || dup.Outcome != idempotency.DuplicateDone || dup.Replayed || dup.Value != "" {
			t.Fatalf("duplicate DoTyped = %v replayed %v, %v; want duplicate_done and ErrResultTooLarge", dup.Outcome, dup.Replayed, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("work ran %d times, want 1", n)
		}
	}},
	{"BinaryCodecRoundTrips", func(t *testing.T, e *env) {
		opts := idempotency.DoOptions{Codec: binaryCodec{}, Namespace: "bin"}
		work := func(context.Context, idempotency.Run) (string, error) { return "héllo\x00world", nil }
		if _, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, opts); err != nil {
			t.Fatalf("first DoTyped: %v", err)
		}
		dup, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, opts)
		if err != nil || !dup.Replayed || dup.Value != "héllo\x00world" {
			t.Fatalf("duplicate DoTyped = %q replayed %v, %v", dup.Value, dup.Replayed, err)
		}
		// The same key in no namespace is another record.
		if _, err := e.g.Get(t.Context(), e.key); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("Get of the key outside the namespace: %v, want ErrNotFound", err)
		}
		// Another codec does not read it.
		plain := idempotency.DoOptions{Namespace: "bin"}
		if _, err := idempotency.DoTyped(t.Context(), e.g, e.key, fpA, work, plain); !errors.Is(err, idempotency.ErrResultUnreadable) {
			t.Fatalf("DoTyped with JSON over a bin result: %v, want ErrResultUnreadable", err)
		}
	}},
}
