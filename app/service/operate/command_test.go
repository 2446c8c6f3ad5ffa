package operate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
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

func TestListFlags(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name  string
		l     ListFlags
		usage string
	}{
		{name: "defaults", l: ListFlags{Limit: 100}},
		{name: "older than", l: ListFlags{Limit: 1, OlderThan: time.Hour, Codes: "debit_failed", IDs: "A"}},
		{name: "no limit", l: ListFlags{Limit: 0}, usage: "--limit must be at least 1 and --older-than not negative"},
		{name: "negative age", l: ListFlags{Limit: 1, OlderThan: -time.Second}, usage: "--older-than not negative"},
		{name: "bad code", l: ListFlags{Limit: 1, Codes: "nonsense"}, usage: "nonsense"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.l.Options(now)
			var ue *cli.UsageError
			if tc.usage != "" {
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("Options: %v; want a usage error naming %q", err, tc.usage)
				}
				return
			}
			if err != nil || tc.l.OlderThan > 0 && !o.Before.Equal(now.Add(-tc.l.OlderThan)) || tc.l.OlderThan == 0 && !o.Before.IsZero() {
				t.Fatalf("Options: %v, %+v", err, o)
			}
		})
	}
	q := deadLettered(t, "A", "B", "C")
	for _, tc := range []struct {
		name         string
		l            ListFlags
		shown, total int
	}{
		{"two of three", ListFlags{Limit: 2}, 2, 3},
		{"json", ListFlags{Limit: 2, JSON: true}, 2, 3},
		{"one charge", ListFlags{Limit: 5, IDs: "B", JSON: true}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.l.Options(time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := tc.l.ListTo(t.Context(), q, o, &out); err != nil {
				t.Fatal(err)
			}
			if !tc.l.JSON {
				if !strings.Contains(out.String(), "A") || strings.Count(out.String(), "debit_failed") != tc.shown {
					t.Fatalf("listing:\n%s", out.String())
				}
				return
			}
			var got ListJSON
			if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Entries) != tc.shown || got.Total != tc.total {
				t.Fatalf("listing %+v, %v:\n%s", got, err, out.String())
			}
		})
	}
}

// plainStore is a store that can neither amend nor list results.
type plainStore struct{ driver.Store }

func TestRenotifyFlags(t *testing.T) {
	env := &cli.Env{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer), Getenv: func(string) string { return "" }}
	f := cli.NewFlagSet(env, "renotify", "renotify")
	var ok RenotifyFlags
	ok.Bind(f)
	if err := f.Parse([]string{"--dry-run", "--limit", "10", "--retention", "1h", "--skew-margin", "1s"}, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(r *RenotifyFlags)
		ids   []string
		usage string // "": checked
	}{
		{"ids", func(*RenotifyFlags) {}, []string{"A"}, ""},
		{"all", func(r *RenotifyFlags) { r.All = true }, nil, ""},
		{"both", func(r *RenotifyFlags) { r.All = true }, []string{"A"}, "give CHARGE_IDs or --all, not both"},
		{"neither", func(*RenotifyFlags) {}, nil, "give the CHARGE_IDs to notify again, or --all"},
		{"limit", func(r *RenotifyFlags) { r.Limit = 0 }, []string{"A"}, "--limit and --notify-timeout must be positive"},
		{"short lease", func(r *RenotifyFlags) { r.Lease = 9 * time.Second }, []string{"A"}, "--lease 9s must be at least twice --notify-timeout 5s"},
		{"retention", func(r *RenotifyFlags) { r.Retention = 0 }, []string{"A"}, "--retention must be positive"},
		{"skew", func(r *RenotifyFlags) { r.Skew = time.Minute }, []string{"A"}, "--skew-margin 1m0s must be at least 0 and shorter than --lease 1m0s"},
		{"no channel to send on", func(r *RenotifyFlags) { r.DryRun = false }, []string{"A"}, "--notify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := r.Check(tc.ids)
			var ue *cli.UsageError
			if tc.usage == "" && err != nil || tc.usage != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.usage)) {
				t.Fatalf("Check: %v; want %q", err, tc.usage)
			}
		})
	}
	if got := ok.Proposal([]string{"A", "B"}); got != `renotify --reason "…why…" --charge-id A,B` {
		t.Errorf("Proposal = %s", got)
	}
	store := memstore.New()
	if _, err := ok.Pending(t.Context(), plainStore{store}, "dynamodb", []string{"A"}, time.Now()); err == nil || err.Error() != "the dynamodb store cannot amend or list results" {
		t.Fatalf("Pending on a store without the capabilities: %v", err)
	}
	if _, err := ok.Pending(t.Context(), store, "memory", []string{"A"}, time.Now()); err != nil {
		t.Fatalf("Pending on the memory store: %v", err)
	}
	if rn, err := ok.Renotifier(t.Context(), store, nil); err != nil || rn == nil {
		t.Fatalf("a dry run's Renotifier: %v", err)
	}
}

// renotify understands a waiting charge: nothing was debited, so nothing
// is sent; a notice-first charge says its advance notice went out.
func TestRenotifyOfAWaitingChargeSendsNothingAndSaysWhy(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		rec  driver.Record
		want string
	}{
		{driver.Record{Key: "C1", State: driver.StateWaiting, Status: "NOTICE_SENT", Detail: "notice sent at 2026-12-01T10:00:00Z, debit on or after 2026-12-02T10:00:00Z",
			LeaseUntil: now.Add(24 * time.Hour)}, "the advance notice went out"},
		{driver.Record{Key: "C2", State: driver.StateWaiting, Status: "RETRY_SCHEDULED", Detail: "next attempt at 2026-12-02T10:00:00Z (attempt 2 of 4, after INSUFFICIENT_FUNDS)",
			LeaseUntil: now.Add(24 * time.Hour)}, "not debited yet"},
	} {
		got := Renotifier{}.One(t.Context(), tt.rec, "op", "why", false, now)
		if got.Result != "skipped" || !strings.Contains(got.Why, tt.want) || !strings.Contains(got.Why, "nothing to send") {
			t.Errorf("renotify %s: %+v, want skipped saying %q", tt.rec.Status, got, tt.want)
		}
	}
}
