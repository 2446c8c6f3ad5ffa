package corebank_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
	"github.com/finedge/idempotent-consumer/corebank"
)

func serve(t *testing.T, f corebank.Faults, timeout time.Duration) (*corebank.Ledger, *corebank.Client, string) {
	t.Helper()
	l := corebank.NewLedger(f)
	srv := httptest.NewServer(corebank.Handler(l))
	t.Cleanup(srv.Close)
	c, err := corebank.NewClient(srv.URL, corebank.ClientOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, srv.URL
}

func req(key, account string, minor int64) charge.DebitRequest {
	return charge.DebitRequest{IdempotencyKey: key, AccountID: account, Amount: charge.Money{Minor: minor, Currency: "INR"}, ChargeType: charge.LockerRent}
}

func TestSameKeyAndBodyReplaysWithoutASecondPosting(t *testing.T) {
	l, c, _ := serve(t, corebank.Faults{}, time.Second)
	first, err := c.Debit(t.Context(), req("CHG-1", "001234567890", 50000))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Debit(t.Context(), req("CHG-1", "001234567890", 50000))
	if err != nil {
		t.Fatal(err)
	}
	if first.Reference == "" || again.Reference != first.Reference {
		t.Fatalf("references %q and %q, want the same one", first.Reference, again.Reference)
	}
	entries, err := c.Ledger(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].IdempotencyKey != "CHG-1" || entries[0].AmountMinor != 50000 || entries[0].AccountID != "001234567890" {
		t.Fatalf("ledger = %+v", entries)
	}
	if l.Calls("CHG-1") != 2 {
		t.Fatalf("calls = %d", l.Calls("CHG-1"))
	}
}

func TestReplayAnswers200WithTheReplayHeader(t *testing.T) {
	_, _, url := serve(t, corebank.Faults{}, time.Second)
	post := func() *http.Response {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/debits",
			strings.NewReader(`{"accountId":"001234567890","amount":{"minor":100,"currency":"INR"},"chargeType":"SMS_ALERT_FEE"}`))
		r.Header.Set(corebank.IdempotencyHeader, "K")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post(); r.StatusCode != http.StatusCreated || r.Header.Get(corebank.ReplayedHeader) != "" {
		t.Fatalf("first: %d %v", r.StatusCode, r.Header)
	}
	if r := post(); r.StatusCode != http.StatusOK || r.Header.Get(corebank.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %v", r.StatusCode, r.Header)
	}
}

func TestSameKeyDifferentBodyIsRefusedPermanently(t *testing.T) {
	l, c, _ := serve(t, corebank.Faults{}, time.Second)
	if _, err := c.Debit(t.Context(), req("CHG-2", "001234567890", 100)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Debit(t.Context(), req("CHG-2", "001234567890", 999))
	if charge.Classify(err) != charge.ClassPermanent || !strings.Contains(err.Error(), "422") {
		t.Fatalf("err = %v, want a permanent 422", err)
	}
	if len(l.Entries()) != 1 {
		t.Fatal("the reused key posted again")
	}
}

func TestDeclineIsPermanentWithItsCode(t *testing.T) {
	_, c, _ := serve(t, corebank.Faults{DeclineAccounts: map[string]string{"007777777777": "ACCOUNT_CLOSED"}}, time.Second)
	_, err := c.Debit(t.Context(), req("CHG-3", "007777777777", 100))
	var d *charge.DeclineError
	if !errors.As(err, &d) || d.Code != "ACCOUNT_CLOSED" || charge.Classify(err) != charge.ClassPermanent {
		t.Fatalf("err = %v, want DeclineError ACCOUNT_CLOSED", err)
	}
}

func TestOutagesAndTimeoutsAreTransient(t *testing.T) {
	tests := []struct {
		name   string
		faults corebank.Faults
	}{
		{"503", corebank.Faults{TransientRate: 1}},
		{"timeout", corebank.Faults{TimeoutRate: 1}},
		{"lost response", corebank.Faults{TransientAfterPostRate: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, c, _ := serve(t, tt.faults, 100*time.Millisecond)
			_, err := c.Debit(t.Context(), req("CHG-4", "001234567890", 100))
			if err == nil || charge.Classify(err) != charge.ClassRetryable {
				t.Fatalf("err = %v, want a retryable error", err)
			}
			l.SetFaults(corebank.Faults{})
			if _, err := c.Debit(t.Context(), req("CHG-4", "001234567890", 100)); err != nil {
				t.Fatalf("retry after the fault: %v", err)
			}
			if n := len(l.Entries()); n != 1 {
				t.Fatalf("%d postings after fault + retry, want 1", n)
			}
		})
	}
}

func TestStatusClassification(t *testing.T) {
	for status, want := range map[int]charge.Class{
		http.StatusTooManyRequests: charge.ClassRetryable, http.StatusRequestTimeout: charge.ClassRetryable,
		http.StatusBadGateway: charge.ClassRetryable, http.StatusBadRequest: charge.ClassPermanent,
		http.StatusForbidden: charge.ClassPermanent,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		c, _ := corebank.NewClient(srv.URL, corebank.ClientOptions{})
		_, err := c.Debit(context.Background(), req("K", "001234567890", 1))
		srv.Close()
		if got := charge.Classify(err); got != want {
			t.Errorf("HTTP %d: class %v, want %v (err %v)", status, got, want, err)
		}
	}
	// A 2xx whose body cannot be read may have moved money: never permanent.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer srv.Close()
	c, _ := corebank.NewClient(srv.URL, corebank.ClientOptions{})
	if _, err := c.Debit(context.Background(), req("K", "001234567890", 1)); charge.Classify(err) != charge.ClassRetryable {
		t.Fatalf("unreadable 201: err %v", err)
	}
}

func TestMissingIdempotencyKeyIs400(t *testing.T) {
	_, _, url := serve(t, corebank.Faults{}, time.Second)
	resp, err := http.Post(url+"/v1/debits", "application/json", strings.NewReader(`{"accountId":"1","amount":{"minor":1,"currency":"INR"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

func TestFaultsAndResetOverHTTP(t *testing.T) {
	l, c, _ := serve(t, corebank.Faults{}, time.Second)
	if err := c.SetFaults(t.Context(), corebank.FaultsBody{TransientRate: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-5", "001234567890", 1)); err == nil {
		t.Fatal("fault not applied")
	}
	if err := c.SetFaults(t.Context(), corebank.FaultsBody{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-5", "001234567890", 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(l.Entries()) != 0 {
		t.Fatal("reset kept postings")
	}
}

func TestNewClientRefusesABadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := corebank.NewClient(u, corebank.ClientOptions{}); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestDuplicateRequestsCountOnlyRequestsAfterAConfirmedDebit(t *testing.T) {
	l, c, _ := serve(t, corebank.Faults{}, time.Second)
	l.SetFaults(corebank.Faults{TransientAfterPostRate: 1}) // posts, answers 503
	if _, err := c.Debit(t.Context(), req("CHG-6", "001234567890", 100)); err == nil {
		t.Fatal("want the lost response")
	}
	l.SetFaults(corebank.Faults{})
	if _, err := c.Debit(t.Context(), req("CHG-6", "001234567890", 100)); err != nil { // the retry: not a duplicate
		t.Fatal(err)
	}
	if _, err := c.Debit(t.Context(), req("CHG-6", "001234567890", 100)); err != nil { // after a confirmation: a duplicate
		t.Fatal(err)
	}
	rep, err := c.LedgerReport(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count != 1 || rep.DuplicateRequests["CHG-6"] != 1 {
		t.Fatalf("report = %+v, want one posting and one duplicate request", rep)
	}
}
