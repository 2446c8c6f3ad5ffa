package corebank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/finedge/idempotent-consumer/charge"
)

// Client is the HTTP debit adapter: it sends the charge id as the
// Idempotency-Key and classifies the answer: 2xx success; 4xx (but 408 and
// 429) a permanent decline; 408, 429, 5xx, a timeout or a connection error
// transient.
type Client struct {
	base    *url.URL
	http    *http.Client
	timeout time.Duration
}

var _ charge.Debiter = (*Client)(nil)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Timeout bounds each debit call. Default 10s. A timed-out debit is
	// transient: it may have posted, and the retry with the same key is
	// answered from the first posting.
	Timeout time.Duration
	// HTTPClient defaults to a client with sensible connection pooling.
	HTTPClient *http.Client
}

// NewClient returns a Client for the API at baseURL (http://host:port).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("corebank: base URL %q must be http(s)://host[:port]", baseURL)
	}
	if opts.Timeout < 0 {
		return nil, errors.New("corebank: Timeout must not be negative")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.HTTPClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		opts.HTTPClient = &http.Client{Transport: t}
	}
	return &Client{base: u, http: opts.HTTPClient, timeout: opts.Timeout}, nil
}

// Debit implements charge.Debiter.
func (c *Client) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	body, err := json.Marshal(DebitBody{
		AccountID: req.AccountID, ChargeType: string(req.ChargeType), Narrative: req.Narrative,
		Amount: MoneyBody{Minor: req.Amount.Minor, Currency: string(req.Amount.Currency)},
	})
	if err != nil {
		return charge.DebitReceipt{}, charge.Permanent(err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.JoinPath("/v1/debits").String(), bytes.NewReader(body))
	if err != nil {
		return charge.DebitReceipt{}, charge.Permanent(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(IdempotencyHeader, req.IdempotencyKey)
	resp, err := c.http.Do(hreq)
	if err != nil {
		return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: %w", req.IdempotencyKey, err) // transient
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: read answer: %w", req.IdempotencyKey, err)
	}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		var ok DebitResponse
		if err := json.Unmarshal(raw, &ok); err != nil || ok.Reference == "" {
			// Money may have moved: never permanent. The retry replays it.
			return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: HTTP %d with an unreadable body", req.IdempotencyKey, s)
		}
		return charge.DebitReceipt{Reference: ok.Reference}, nil
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		var e ErrorResponse
		_ = json.Unmarshal(raw, &e)
		return charge.DebitReceipt{}, statusError(s, e)
	default:
		var e ErrorResponse
		_ = json.Unmarshal(raw, &e)
		if e.Error == "DECLINED" && e.Code != "" {
			return charge.DebitReceipt{}, &charge.DeclineError{Code: e.Code, Message: e.Message}
		}
		return charge.DebitReceipt{}, charge.Permanent(statusError(s, e))
	}
}

// Ledger fetches every posting (the demo's exactly-once check).
func (c *Client) Ledger(ctx context.Context) ([]Entry, error) {
	out, err := c.LedgerReport(ctx)
	return out.Entries, err
}

// LedgerReport fetches the postings and the duplicate requests.
func (c *Client) LedgerReport(ctx context.Context) (LedgerResponse, error) {
	var out LedgerResponse
	err := c.call(ctx, http.MethodGet, "/v1/ledger", nil, &out)
	return out, err
}

// SetFaults replaces the simulator's injected faults.
func (c *Client) SetFaults(ctx context.Context, f FaultsBody) error {
	return c.call(ctx, http.MethodPut, "/v1/faults", f, nil)
}

// Reset forgets every posting.
func (c *Client) Reset(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/reset", nil, nil)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base.JoinPath(path).String(), body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("corebank: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e ErrorResponse
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e)
		return statusError(resp.StatusCode, e)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

func durationMS(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
