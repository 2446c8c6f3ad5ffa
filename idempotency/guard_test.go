package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

func TestNewGuardChecksOptions(t *testing.T) {
	s := memstore.New()
	for name, o := range map[string]idempotency.Options{
		"negative lease":            {Lease: -time.Second},
		"negative retention":        {Retention: -time.Second},
		"retention below the lease": {Lease: time.Hour, Retention: time.Minute},
	} {
		if _, err := idempotency.NewGuard(s, o); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := idempotency.NewGuard(nil, idempotency.Options{}); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("nil store: err = %v", err)
	}
	g, err := idempotency.NewGuard(s, idempotency.Options{})
	if err != nil || g.Lease() != idempotency.DefaultLease {
		t.Fatalf("defaults: %v, lease %v", err, g.Lease())
	}
}

func TestClaimRefusesAnEmptyKey(t *testing.T) {
	g, _ := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	if _, err := g.Claim(t.Context(), "", "fp"); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

// What a store's answer to a claim amounts to (ClaimOf, as Guard.Claim
// returns it).
func TestClaimOf(t *testing.T) {
	rec := func(s driver.State, fp string) driver.Record {
		return driver.Record{State: s, Fingerprint: fp, Token: "theirs", Attempt: 1}
	}
	ours := func(s driver.State, attempt int) driver.Record {
		return driver.Record{State: s, Fingerprint: "a", Token: "ours", Attempt: attempt}
	}
	tests := []struct {
		name string
		res  driver.ClaimResult
		want idempotency.Outcome
	}{
		{"fresh", driver.ClaimResult{Acquired: true}, idempotency.Acquired},
		{"reclaim", driver.ClaimResult{Acquired: true, Reclaimed: true}, idempotency.Reclaimed},
		{"done", driver.ClaimResult{Record: rec(driver.StateDone, "a")}, idempotency.DuplicateDone},
		{"failed", driver.ClaimResult{Record: rec(driver.StateFailed, "a")}, idempotency.DuplicateFailed},
		{"in progress", driver.ClaimResult{Record: rec(driver.StateInProgress, "a")}, idempotency.DuplicateInProgress},
		{"conflict beats done", driver.ClaimResult{Record: rec(driver.StateDone, "b")}, idempotency.Conflict},
		{"conflict beats in progress", driver.ClaimResult{Record: rec(driver.StateInProgress, "b")}, idempotency.Conflict},
		// A retried write whose first attempt landed finds our own record.
		{"our own claim landed", driver.ClaimResult{Record: ours(driver.StateInProgress, 1)}, idempotency.Acquired},
		{"our own reclaim landed", driver.ClaimResult{Record: ours(driver.StateInProgress, 3)}, idempotency.Reclaimed},
		{"our token but finished is not ours to work", driver.ClaimResult{Record: ours(driver.StateDone, 1)}, idempotency.DuplicateDone},
	}
	for _, tt := range tests {
		req := driver.ClaimRequest{Key: "K", Token: "ours", Fingerprint: "a"}
		if got := idempotency.ClaimOf(req, tt.res).Outcome; got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestFingerprintIsUnambiguous(t *testing.T) {
	if idempotency.Fingerprint("ab", "c") == idempotency.Fingerprint("a", "bc") {
		t.Fatal("part boundaries are not part of the fingerprint")
	}
	// Stable across versions: a fingerprint stored by an earlier release
	// must still match its redelivery, or every redelivery would be a
	// Conflict. SHA-256 over each part's 8-byte big-endian length and bytes.
	if got, want := idempotency.Fingerprint("x"), "028f0df5b8596fbcd10c9720b7a4784f8e7e04f629bd5a62bfbdf139678b6624"; got != want {
		t.Fatalf("Fingerprint(\"x\") = %s, want %s: the fingerprint changed, and stored records would no longer match", got, want)
	}
}

// The default fencing tokens are 128 random bits in hex: every claim gets
// its own.
func TestRandomTokensDiffer(t *testing.T) {
	g, _ := idempotency.NewGuard(memstore.New(), idempotency.Options{})
	seen := map[string]bool{}
	for i := range 1000 {
		c, err := g.Claim(t.Context(), fmt.Sprint("K", i), "fp")
		tok := c.Record.Token
		if err != nil || c.Outcome != idempotency.Acquired || len(tok) != 32 || seen[tok] {
			t.Fatalf("claim %d: token %q outcome %v err %v (seen before: %v)", i, tok, c.Outcome, err, seen[tok])
		}
		seen[tok] = true
	}
}

// Whatever the work returns, the record stays small enough for every
// store's item limit: a 300 KB detail (past DynamoDB's 400 KB item with
// the history) would make a record that can never be finished.
func TestARecordsDetailIsBounded(t *testing.T) {
	s := memstore.New()
	g, _ := idempotency.NewGuard(s, idempotency.Options{})
	huge := strings.Repeat("ü", 150_000)
	_, err := g.Do(t.Context(), "K", "fp", func(context.Context, idempotency.Run) (idempotency.Done, error) {
		return idempotency.Done{Status: "OK", Detail: huge}, nil
	}, idempotency.DoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := g.Get(t.Context(), "K")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != driver.StateDone || len(rec.Detail) > driver.MaxDetailBytes || !utf8.ValidString(rec.Detail) || !strings.HasPrefix(huge, strings.TrimSuffix(rec.Detail, "…")) {
		t.Errorf("record %s with a %d-byte detail, want DONE with at most %d bytes cut on a rune", rec.State, len(rec.Detail), driver.MaxDetailBytes)
	}
}
