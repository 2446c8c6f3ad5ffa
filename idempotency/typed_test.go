package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

type receipt struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

func TestDoTypedOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		work    func(context.Context, idempotency.Run) (receipt, error)
		outcome idempotency.Outcome
		state   driver.State // "" for no final state
		wantErr error        // DoTyped's error
		second  idempotency.Outcome
	}{
		{"value stored and replayed", func(context.Context, idempotency.Run) (receipt, error) {
			return receipt{ID: "r-1", Amount: 2500}, nil
		}, idempotency.Acquired, driver.StateDone, nil, idempotency.DuplicateDone},
		{"permanent error recorded FAILED", func(context.Context, idempotency.Run) (receipt, error) {
			return receipt{}, fmt.Errorf("declined: %w", idempotency.ErrPermanent)
		}, idempotency.Failed, driver.StateFailed, nil, idempotency.DuplicateFailed},
		{"not started gives the lease up", func(context.Context, idempotency.Run) (receipt, error) {
			return receipt{}, fmt.Errorf("refused: %w", idempotency.ErrNotStarted)
		}, idempotency.Unfinished, driver.StateInProgress, nil, idempotency.Reclaimed},
		{"other error keeps the lease", func(context.Context, idempotency.Run) (receipt, error) {
			return receipt{}, errors.New("timeout")
		}, idempotency.Unfinished, driver.StateInProgress, nil, idempotency.DuplicateInProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := doGuard(t)
			res, err := idempotency.DoTyped(t.Context(), g, "k", "fp", tt.work, idempotency.DoOptions{})
			if !errors.Is(err, tt.wantErr) || res.Outcome != tt.outcome || res.Replayed {
				t.Fatalf("DoTyped = %v replayed %v, %v", res.Outcome, res.Replayed, err)
			}
			if r, err := g.Get(t.Context(), "k"); err != nil || r.State != tt.state {
				t.Fatalf("record = %v, %v; want state %v", r.State, err, tt.state)
			}
			again, err := idempotency.DoTyped(t.Context(), g, "k", "fp", func(context.Context, idempotency.Run) (receipt, error) {
				return receipt{ID: "r-2"}, nil
			}, idempotency.DoOptions{})
			var nr *idempotency.NotRunError
			wantNotRun := tt.second == idempotency.DuplicateFailed || tt.second == idempotency.DuplicateInProgress
			if again.Outcome != tt.second || (err != nil) != wantNotRun || wantNotRun && (!errors.As(err, &nr) || nr.Outcome != tt.second) {
				t.Fatalf("second DoTyped = %v, %v; want %v (an error saying so when the work did not run)", again.Outcome, err, tt.second)
			}
			if tt.second == idempotency.DuplicateDone && (!again.Replayed || again.Value != res.Value) {
				t.Fatalf("replay = %+v (replayed %v), want %+v", again.Value, again.Replayed, res.Value)
			}
		})
	}
}

func TestDoTypedRefuses(t *testing.T) {
	g, _ := doGuard(t)
	work := func(context.Context, idempotency.Run) (int, error) { t.Error("work ran"); return 0, nil }
	for _, tt := range []struct {
		name, key string
		opts      idempotency.DoOptions
	}{
		{"empty key", "", idempotency.DoOptions{}},
		{"empty key in a namespace", "", idempotency.DoOptions{Namespace: "payments"}},
		{"namespace with the separator", "k", idempotency.DoOptions{Namespace: "a:b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := idempotency.DoTyped(t.Context(), g, tt.key, "fp", work, tt.opts); !errors.Is(err, idempotency.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDoTypedReadsOnlyItsOwnResults(t *testing.T) {
	g, _ := doGuard(t)
	if _, err := g.Do(t.Context(), "k", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "OK", Detail: "not json"}, nil
	}, idempotency.DoOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := idempotency.DoTyped(t.Context(), g, "k", "fp", func(context.Context, idempotency.Run) (int, error) {
		t.Error("work ran")
		return 0, nil
	}, idempotency.DoOptions{})
	if !errors.Is(err, idempotency.ErrResultUnreadable) || res.Outcome != idempotency.DuplicateDone || res.Replayed {
		t.Fatalf("DoTyped over a Do record = %v replayed %v, %v", res.Outcome, res.Replayed, err)
	}
}

type failingCodec struct{}

func (failingCodec) Name() string               { return "failing" }
func (failingCodec) Encode(any) ([]byte, error) { return nil, errors.New("cannot") }
func (failingCodec) Decode([]byte, any) error   { return nil }

func TestDoTypedUnencodableRunsOnce(t *testing.T) {
	g, _ := doGuard(t)
	runs := 0
	work := func(context.Context, idempotency.Run) (int, error) { runs++; return 7, nil }
	opts := idempotency.DoOptions{Codec: failingCodec{}}
	res, err := idempotency.DoTyped(t.Context(), g, "k", "fp", work, opts)
	if !errors.Is(err, idempotency.ErrResultNotStored) || errors.Is(err, idempotency.ErrResultTooLarge) || res.Value != 7 {
		t.Fatalf("first = %+v, %v", res, err)
	}
	if _, err := idempotency.DoTyped(t.Context(), g, "k", "fp", work, opts); !errors.Is(err, idempotency.ErrResultNotStored) {
		t.Fatalf("duplicate err = %v", err)
	}
	if runs != 1 {
		t.Fatalf("work ran %d times", runs)
	}
}

func TestDoTypedDoesNotCutTheResult(t *testing.T) {
	g, _ := doGuard(t)
	long := strings.Repeat("é", 3*driver.MaxDetailBytes)
	work := func(context.Context, idempotency.Run) (string, error) { return long, nil }
	if _, err := idempotency.DoTyped(t.Context(), g, "k", "fp", work, idempotency.DoOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := idempotency.DoTyped(t.Context(), g, "k", "fp", work, idempotency.DoOptions{})
	if err != nil || res.Value != long {
		t.Fatalf("replayed %d bytes, %v; want %d", len(res.Value), err, len(long))
	}
}

// A payment made at most once per request key: every retry of the request
// gets the first payment back, not a second one.
func ExampleDoTyped() {
	guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{}) // DynamoDB, SQLite, … in production
	if err != nil {
		panic(err)
	}
	type Payment struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	made := 0
	pay := func(ctx context.Context, run idempotency.Run) (Payment, error) {
		made++ // the side effect
		return Payment{ID: fmt.Sprintf("pay_%d", made), Amount: 2500}, nil
	}
	ctx := context.Background()
	fp := idempotency.Fingerprint("POST", "/payments", `{"amount":2500}`)
	opts := idempotency.DoOptions{Namespace: "payments"}
	for range 3 {
		res, err := idempotency.DoTyped(ctx, guard, "req-7f3a", fp, pay, opts)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(res.Outcome, res.Value.ID, "replayed:", res.Replayed)
	}
	fmt.Println("payments made:", made)
	// Output:
	// acquired pay_1 replayed: false
	// duplicate_done pay_1 replayed: true
	// duplicate_done pay_1 replayed: true
	// payments made: 1
}

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
