package idempotency_test

import (
	"context"
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
