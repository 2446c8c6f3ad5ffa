package corebanksim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

var day1 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// testLedger posts debits a, b, c on day1, day1+1h, day1+2h (the clock
// then stays at day1+2h until moved).
func testLedger(t *testing.T) (*Ledger, *time.Time) {
	t.Helper()
	l := NewLedger(Faults{})
	now := day1
	l.now = func() time.Time { return now }
	for i, k := range []string{"a", "b", "c"} {
		now = day1.Add(time.Duration(i) * time.Hour)
		_, err := l.Debit(context.Background(), charge.DebitRequest{
			IdempotencyKey: k, AccountID: "ACC-" + k, Amount: charge.Money{Minor: int64(100 * (i + 1)), Currency: "INR"},
			ChargeType: "SMS_ALERT_FEE", Narrative: "fee " + k,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return l, &now
}

type got struct {
	key      string
	reversal bool
	date     string
}

func summarize(ps []statement.Posting) []got {
	var out []got
	for _, p := range ps {
		out = append(out, got{p.BankKey, p.Reversal, p.BookingDate.Format(time.DateOnly)})
	}
	return out
}

func equal(a, b []got) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestStatement(t *testing.T) {
	day := day1.Truncate(24 * time.Hour)
	for _, tc := range []struct {
		name     string
		act      func(l *Ledger, now *time.Time) error
		from, to time.Time
		want     []got
	}{
		{"all", nil, day, day.AddDate(0, 0, 1),
			[]got{{"a", false, "2026-12-01"}, {"b", false, "2026-12-01"}, {"c", false, "2026-12-01"}}},
		{"period excludes later", nil, day, day1.Add(90 * time.Minute),
			[]got{{"a", false, "2026-12-01"}, {"b", false, "2026-12-01"}}},
		{"reversed same day", func(l *Ledger, _ *time.Time) error { return l.Reverse("b") }, day, day.AddDate(0, 0, 1),
			[]got{{"a", false, "2026-12-01"}, {"b", false, "2026-12-01"}, {"c", false, "2026-12-01"}, {"b", true, "2026-12-01"}}},
		{"reversed next day, first day's statement", func(l *Ledger, now *time.Time) error {
			*now = day.AddDate(0, 0, 1).Add(time.Hour)
			return l.Reverse("a")
		}, day, day.AddDate(0, 0, 1),
			[]got{{"a", false, "2026-12-01"}, {"b", false, "2026-12-01"}, {"c", false, "2026-12-01"}}},
		{"reversed next day, second day's statement", func(l *Ledger, now *time.Time) error {
			*now = day.AddDate(0, 0, 1).Add(time.Hour)
			return l.Reverse("a")
		}, day.AddDate(0, 0, 1), day.AddDate(0, 0, 2),
			[]got{{"a", true, "2026-12-02"}}},
		{"dropped", func(l *Ledger, _ *time.Time) error { return l.Drop("c") }, day, day.AddDate(0, 0, 1),
			[]got{{"a", false, "2026-12-01"}, {"b", false, "2026-12-01"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, now := testLedger(t)
			if tc.act != nil {
				if err := tc.act(l, now); err != nil {
					t.Fatal(err)
				}
			}
			ps := l.Statement(tc.from, tc.to)
			if g := summarize(ps); !equal(g, tc.want) {
				t.Fatalf("Statement = %v, want %v", g, tc.want)
			}
			// Entries keeps every posting whatever was reversed or dropped.
			if n := len(l.Entries()); n != 3 {
				t.Fatalf("Entries = %d, want 3", n)
			}
			for k, n := range l.PostingsByKey() {
				if n != 1 {
					t.Fatalf("PostingsByKey[%s] = %d", k, n)
				}
			}
			// Round trip through camt.053 on the collection-account side.
			var buf bytes.Buffer
			if err := statement.WriteCamt053(&buf, statement.StatementInfo{ID: "S1", Account: "FEES-COLLECTION", Period: statement.Period{From: tc.from, To: tc.to}}, ps); err != nil {
				t.Fatal(err)
			}
			var back []statement.Posting
			h, err := statement.Read(&buf, "s.xml", statement.Options{CollectionAccount: "FEES-COLLECTION"}, func(p statement.Posting) error {
				back = append(back, p)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if g := summarize(back); !equal(g, tc.want) {
				t.Fatalf("read back %v, want %v", g, tc.want)
			}
			if !h.Period.From.Equal(tc.from) || !h.Period.To.Equal(tc.to) {
				t.Fatalf("period %v, want [%v,%v)", h.Period, tc.from, tc.to)
			}
			for i, p := range back {
				w := ps[i]
				if p.Account != w.Account || p.Amount != w.Amount || p.Reference != w.Reference || p.Narrative != w.Narrative {
					t.Fatalf("posting %d read back %+v, want %+v", i, p, w)
				}
			}
		})
	}
}

func TestReverseDropErrors(t *testing.T) {
	l, _ := testLedger(t)
	for _, tc := range []struct {
		name string
		fn   func() error
		want error
	}{
		{"reverse unknown", func() error { return l.Reverse("zz") }, ErrUnknownKey},
		{"drop unknown", func() error { return l.Drop("zz") }, ErrUnknownKey},
		{"reverse", func() error { return l.Reverse("a") }, nil},
		{"reverse twice", func() error { return l.Reverse("a") }, errors.New("any")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn()
			switch {
			case tc.want == nil && err != nil:
				t.Fatal(err)
			case tc.want != nil && err == nil:
				t.Fatal("no error")
			case errors.Is(tc.want, ErrUnknownKey) && !errors.Is(err, ErrUnknownKey):
				t.Fatalf("err = %v, want ErrUnknownKey", err)
			}
		})
	}
	l.Reset()
	if len(l.Entries()) != 0 || len(l.Statement(time.Time{}, day1.AddDate(1, 0, 0))) != 0 {
		t.Fatal("Reset left postings")
	}
}

func TestStatementHTTP(t *testing.T) {
	l, _ := testLedger(t)
	srv := httptest.NewServer(Handler(l))
	defer srv.Close()
	admin, err := NewAdmin(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := admin.Reverse(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Drop(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []func(context.Context, string) error{admin.Reverse, admin.Drop} {
		if err := fn(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("unknown key: err = %v, want a 404", err)
		}
	}
	from, to := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	want := []got{{"a", false, "2026-12-01"}, {"c", false, "2026-12-01"}, {"a", true, "2026-12-01"}}
	for _, tc := range []struct{ format, account, readAs string }{
		{"", "", DefaultCollectionAccount},
		{"camt053", "GB82WEST12345698765432", "GB82WEST12345698765432"},
		{"csv", "", ""},
	} {
		t.Run("format="+tc.format, func(t *testing.T) {
			b, err := admin.Statement(ctx, from, to, tc.format, tc.account)
			if err != nil {
				t.Fatal(err)
			}
			name := "s.xml"
			if tc.format == "csv" {
				name = "s.csv"
			}
			var back []statement.Posting
			if _, err := statement.Read(bytes.NewReader(b), name, statement.Options{CollectionAccount: tc.readAs}, func(p statement.Posting) error {
				back = append(back, p)
				return nil
			}); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if g := summarize(back); !equal(g, want) {
				t.Fatalf("got %v, want %v", g, want)
			}
		})
	}
	for _, q := range []string{"", "from=2026-12-01", "from=2026-12-01&to=yesterday", "from=2026-12-02&to=2026-12-01", "from=2026-12-01&to=2026-12-02&format=pdf"} {
		t.Run("bad "+q, func(t *testing.T) {
			resp, err := srv.Client().Get(srv.URL + "/v1/statement?" + q)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Error, Message string }
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error != "BAD_REQUEST" {
				t.Fatalf("status %d body %s, want 400 JSON", resp.StatusCode, b)
			}
		})
	}
	// The ledger shows the marks.
	rep, err := admin.LedgerReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count != 3 || rep.Entries[0].ReversedAt == nil || !rep.Entries[1].Dropped {
		t.Fatalf("ledger %+v", rep)
	}
}
