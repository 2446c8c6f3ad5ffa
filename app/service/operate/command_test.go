package operate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/memstore"
)

func TestReopenOptionsSettle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     ReopenOptions
		args  []string
		usage string // "": settled
	}{
		{"settled", ReopenOptions{Reason: "INC-1", Retention: 24 * time.Hour}, []string{"CHG-1"}, ""},
		{"no charge", ReopenOptions{Reason: "INC-1", Retention: 24 * time.Hour}, nil, "give exactly one CHARGE_ID (see chargerecovery reopen -h)"},
		{"two charges", ReopenOptions{Reason: "INC-1", Retention: 24 * time.Hour}, []string{"A", "B"}, "give exactly one CHARGE_ID"},
		{"blank reason", ReopenOptions{Reason: " ", Retention: 24 * time.Hour}, []string{"CHG-1"}, "--reason is required"},
		{"short retention", ReopenOptions{Reason: "INC-1", Retention: time.Hour}, []string{"CHG-1"}, "--retention 1h0m0s is under 24h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Settle("reopen", tc.args)
			var ue *cli.UsageError
			if tc.usage == "" {
				if err != nil || tc.o.ID != "CHG-1" || tc.o.Proposal() != `reopen --new-attempt --charge-id CHG-1 --reason "INC-1"` {
					t.Fatalf("Settle: %v, %+v, %s", err, tc.o, tc.o.Proposal())
				}
				return
			}
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
				t.Fatalf("Settle: %v; want a usage error naming %q", err, tc.usage)
			}
		})
	}
}

func TestHardDeclineNamesTheCodeOfAFailedRecordOnly(t *testing.T) {
	store := memstore.New()
	g, err := idempotency.NewGuard(store, idempotency.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id, detail := range map[string]string{"CHG-CLOSED": "debit declined: ACCOUNT_CLOSED", "CHG-FUNDS": "debit declined: INSUFFICIENT_FUNDS", "CHG-DONE": ""} {
		c, err := g.Claim(t.Context(), id, "fp")
		if err != nil {
			t.Fatal(err)
		}
		if detail == "" {
			err = g.Complete(t.Context(), c.Lease(), "DEBITED", "")
		} else {
			err = g.Fail(t.Context(), c.Lease(), "DEBIT_FAILED", detail)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Claim(t.Context(), "CHG-OPEN", "fp"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"CHG-CLOSED": "a new attempt on a hard decline, ACCOUNT_CLOSED (", "CHG-FUNDS": "", "CHG-DONE": "", "CHG-OPEN": "", "CHG-NONE": ""} {
		if got := HardDecline(t.Context(), store, id, time.Now()); want == "" && got != "" || !strings.HasPrefix(got, want) {
			t.Errorf("HardDecline(%s) = %q, want %q…", id, got, want)
		}
	}
}

func TestRedriveFlagsSettleAndCount(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		r        RedriveFlags
		usage    string
		proposal string
	}{
		{name: "defaults", r: RedriveFlags{Retention: 30 * 24 * time.Hour}, proposal: `redrive --reason "…why…"`},
		{name: "chosen", r: RedriveFlags{Codes: "debit_failed", IDs: "A,B", Retention: 30 * 24 * time.Hour, Run: RedriveRun{}}, proposal: `redrive --reason-code debit_failed --charge-id A,B --reason "…why…"`},
		{name: "bad code", r: RedriveFlags{Codes: "nonsense", Retention: 30 * 24 * time.Hour}, usage: "nonsense"},
		{name: "negative max", r: RedriveFlags{Retention: 30 * 24 * time.Hour, Run: RedriveRun{}, MaxAge: -time.Hour}, usage: "--max and --max-age must not be negative"},
		{name: "max age past retention", r: RedriveFlags{Retention: 48 * time.Hour, MaxAge: 49 * time.Hour}, usage: "--max-age 49h0m0s must be positive and shorter than --retention 48h0m0s"},
		{name: "retention of a day", r: RedriveFlags{Retention: 24 * time.Hour}, usage: "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Settle(now)
			if tc.usage != "" {
				if err == nil || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("Settle: %v; want an error naming %q", err, tc.usage)
				}
				return
			}
			if err != nil || tc.r.Run.MaxAge != tc.r.Retention-24*time.Hour || !tc.r.Run.Before.Equal(now) || tc.r.Proposal() != tc.proposal {
				t.Fatalf("Settle: %v, %+v, %s", err, tc.r.Run, tc.r.Proposal())
			}
		})
	}
	q := deadLettered(t, "A", "B", "C")
	r := RedriveFlags{IDs: "A,C", Retention: 30 * 24 * time.Hour}
	if err := r.Settle(time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, err := CountMoves(t.Context(), q, r.Run); err != nil || n != 2 {
		t.Fatalf("CountMoves = %d, %v; want 2", n, err)
	}
	if depth, err := q.Depth(t.Context()); err != nil || depth.DLQ != 3 {
		t.Fatalf("after a count, DLQ depth %+v, %v; want all 3 still there", depth, err)
	}
}
