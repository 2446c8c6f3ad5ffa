package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
)

// A string that is not valid UTF-8 is turned into U+FFFD by encoding/json:
// the first caller gets the work's value, every duplicate another one.
// "handed back, decoded, to every duplicate" is not the same value.
func TestAttackTypedInvalidUTF8IsTheSameValueForDuplicates(t *testing.T) {
	g, _ := doGuard(t)
	type ref struct{ Token string }
	work := func(context.Context, idempotency.Run) (ref, error) { return ref{Token: "ab\xffcd"}, nil }
	first, err := idempotency.DoTyped(t.Context(), g, "utf8", "fp", work, idempotency.DoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := idempotency.DoTyped(t.Context(), g, "utf8", "fp", work, idempotency.DoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.Value != dup.Value {
		t.Fatalf("first caller got %q, the duplicate %q (replayed %v)", first.Value.Token, dup.Value.Token, dup.Replayed)
	}
}

// Same class: a value JSON does not round-trip (an unexported field, a
// json:"-" field) is given whole to the first caller and stripped to the
// duplicates, silently.
func TestAttackTypedLossyValueIsTheSameForDuplicates(t *testing.T) {
	g, _ := doGuard(t)
	type payment struct {
		ID     string
		Amount int64 `json:"-"`
	}
	work := func(context.Context, idempotency.Run) (payment, error) { return payment{ID: "p1", Amount: 2500}, nil }
	first, _ := idempotency.DoTyped(t.Context(), g, "lossy", "fp", work, idempotency.DoOptions{})
	dup, _ := idempotency.DoTyped(t.Context(), g, "lossy", "fp", work, idempotency.DoOptions{})
	if first.Value != dup.Value {
		t.Fatalf("first caller got %+v, the duplicate %+v, no error", first.Value, dup.Value)
	}
}

type namedCodec struct{ name string }

func (c namedCodec) Name() string                  { return c.name }
func (namedCodec) Encode(v any) ([]byte, error)    { return json.Marshal(v) }
func (namedCodec) Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

// Codec names are not validated: a name that makes the Status one of the
// markers, or a name longer than MaxDetailBytes (the Status is cut), turns
// a stored result into an error for every duplicate, though the first call
// succeeded.
func TestAttackTypedCodecNameIsValidated(t *testing.T) {
	for _, name := range []string{"NOT STORED: TOO LARGE", strings.Repeat("c", 5000)} {
		g, _ := doGuard(t)
		opts := idempotency.DoOptions{Codec: namedCodec{name}}
		work := func(context.Context, idempotency.Run) (int, error) { return 7, nil }
		first, err := idempotency.DoTyped(t.Context(), g, "k", "fp", work, opts)
		if err != nil {
			if errors.Is(err, idempotency.ErrInvalid) {
				continue // refusing the name is a fix
			}
			t.Fatalf("codec %.30q: first call: %.160v", name, err)
		}
		dup, err := idempotency.DoTyped(t.Context(), g, "k", "fp", work, opts)
		if err != nil || dup.Value != first.Value {
			t.Errorf("codec %.30q: the first call succeeded (%d), the duplicate: %v, %.160v", name, first.Value, dup.Value, err)
		}
	}
}

// "Another codec, or a record written by Guard.Do, is ErrResultUnreadable":
// a Guard.Do record whose Status happens to be "RESULT json" is decoded as
// a typed result (the status namespace is shared with Do's free-form Status).
func TestAttackTypedReadsAGuardDoRecordAsUnreadable(t *testing.T) {
	g, _ := doGuard(t)
	_, err := g.Do(t.Context(), "shared", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "RESULT json", Detail: `{"ID":"forged"}`}, nil
	}, idempotency.DoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type receiptT struct{ ID string }
	res, err := idempotency.DoTyped(t.Context(), g, "shared", "fp", func(context.Context, idempotency.Run) (receiptT, error) {
		return receiptT{ID: "real"}, nil
	}, idempotency.DoOptions{})
	if !errors.Is(err, idempotency.ErrResultUnreadable) {
		t.Fatalf("a Guard.Do record read by DoTyped: %+v replayed %v, %v; want ErrResultUnreadable", res.Value, res.Replayed, err)
	}
}

// "never a zero value passed off as the result": a record written by
// DoTyped[A] and read by DoTyped[B] (a deploy that renamed a field, two
// call sites sharing a namespace) decodes under encoding/json's leniency
// into B's zero value, Replayed true, no error.
func TestAttackTypedAnotherTypeIsUnreadable(t *testing.T) {
	g, _ := doGuard(t)
	type v1 struct {
		ID string `json:"id"`
	}
	type v2 struct {
		PaymentID string `json:"payment_id"`
	}
	opts := idempotency.DoOptions{Namespace: "payments"}
	if _, err := idempotency.DoTyped(t.Context(), g, "k", "fp", func(context.Context, idempotency.Run) (v1, error) {
		return v1{ID: "pay_1"}, nil
	}, opts); err != nil {
		t.Fatal(err)
	}
	res, err := idempotency.DoTyped(t.Context(), g, "k", "fp", func(context.Context, idempotency.Run) (v2, error) {
		return v2{PaymentID: "pay_2"}, nil
	}, opts)
	if err == nil && res.Value == (v2{}) {
		t.Fatalf("a v1 record read as v2: zero value %+v, replayed %v, no error", res.Value, res.Replayed)
	}
}
