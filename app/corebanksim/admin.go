package corebanksim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/finedge/idempotent-consumer/app/corebank"
)

// Admin calls the simulator's admin API (the ledger, faults and reset): what
// the demo, the bench and the tests use to set the bank up and to check that
// every charge was debited exactly once. Production code has no such call.
type Admin struct {
	base    *url.URL
	http    *http.Client
	timeout time.Duration
}

// NewAdmin returns an Admin for the simulator at baseURL. hc nil is
// http.DefaultClient (a simulator behind TLS needs a client that trusts it).
func NewAdmin(baseURL string, hc *http.Client) (*Admin, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("corebanksim: base URL must be an absolute http(s) URL")
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Admin{base: u, http: hc, timeout: 10 * time.Second}, nil
}

// Ledger fetches every posting (the demo's exactly-once check).
func (a *Admin) Ledger(ctx context.Context) ([]Entry, error) {
	out, err := a.LedgerReport(ctx)
	return out.Entries, err
}

// LedgerReport fetches the postings and the duplicate requests.
func (a *Admin) LedgerReport(ctx context.Context) (LedgerResponse, error) {
	var out LedgerResponse
	err := a.call(ctx, http.MethodGet, "/v1/ledger", nil, &out)
	return out, err
}

// SetFaults replaces the simulator's injected faults.
func (a *Admin) SetFaults(ctx context.Context, f FaultsBody) error {
	return a.call(ctx, http.MethodPut, "/v1/faults", f, nil)
}

// Reset forgets every posting.
func (a *Admin) Reset(ctx context.Context) error {
	return a.call(ctx, http.MethodPost, "/v1/reset", nil, nil)
}

// Statement fetches the ledger as a bank statement of [from, to): format
// "camt053" or "csv" (empty: camt053), account the collection account
// (empty: DefaultCollectionAccount).
func (a *Admin) Statement(ctx context.Context, from, to time.Time, format, account string) ([]byte, error) {
	q := url.Values{"from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	if format != "" {
		q.Set("format", format)
	}
	if account != "" {
		q.Set("account", account)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	u := a.base.JoinPath("/v1/statement")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("corebanksim: GET /v1/statement: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e corebank.ErrorResponse
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		return nil, statusError(resp.StatusCode, e)
	}
	return io.ReadAll(resp.Body)
}

// Reverse has the bank reverse key's posting.
func (a *Admin) Reverse(ctx context.Context, key string) error {
	return a.call(ctx, http.MethodPost, "/v1/ledger/"+url.PathEscape(key)+"/reverse", nil, nil)
}

// Drop has the bank lose key's posting (the statement leaves it out).
func (a *Admin) Drop(ctx context.Context, key string) error {
	return a.call(ctx, http.MethodPost, "/v1/ledger/"+url.PathEscape(key)+"/drop", nil, nil)
}

func (a *Admin) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base.JoinPath(path).String(), body)
	if err != nil {
		return err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("corebanksim: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e corebank.ErrorResponse
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		return statusError(resp.StatusCode, e)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
