package corebank

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/finedge/idempotent-consumer/internal/redact"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/circuit"
)

// Client is the HTTP debit adapter. It sends the charge id as the
// Idempotency-Key and classifies every answer in one place (classify): only
// an answer that matches a configured decline rule is a final refusal
// (*charge.DeclineError); every other failure is a *charge.BankError, never
// final: BankUnavailable (5xx, 408, 409, 423, 425, 429, timeouts, resets, an
// unreadable 2xx) or BankRejected (any other 3xx/4xx: our requests are wrong
// or unauthorised). Only a request that provably never left (connection
// refused, open circuit) is marked NotSent.
type Client struct {
	base     *url.URL
	http     *http.Client
	timeout  time.Duration
	declines []DeclineRule
	posted   []string
	pending  []string
	breaker  Breaker
	explain  func(error) string
	health   string
	headers  func(context.Context, http.Header)
}

var (
	_ charge.Debiter  = (*Client)(nil)
	_ charge.Enquirer = (*Client)(nil)
)

// Breaker is the circuit breaker the client reports to (circuit.Breaker).
type Breaker interface {
	// Allow returns an error while calls must not be made (open, or
	// half-open with its one trial call already out), and the ticket the
	// call's result is reported with.
	Allow() (circuit.Ticket, error)
	// Record reports a call's result: nil when the bank answered as a
	// working bank does (a success or a decline), else the failure.
	Record(t circuit.Ticket, err error)
	// Abandon reports an allowed call that ended without an answer
	// because its caller gave up: it says nothing about the bank.
	Abandon(t circuit.Ticket)
}

// DeclineRule says which answer is the bank's explicit, final decline: the
// HTTP status and the "error" field of the JSON body.
type DeclineRule struct {
	Status int
	Error  string
}

func (r DeclineRule) String() string { return fmt.Sprintf("%d:%s", r.Status, r.Error) }

// DefaultDeclines is the simulator's decline: 422 {"error":"DECLINED","code":…}.
var DefaultDeclines = []DeclineRule{{Status: http.StatusUnprocessableEntity, Error: "DECLINED"}}

// ParseDeclineRules reads "STATUS:ERROR,..." (e.g. "422:DECLINED,402:INSUFFICIENT_FUNDS").
func ParseDeclineRules(s string) ([]DeclineRule, error) {
	var out []DeclineRule
	for _, part := range strings.Split(s, ",") {
		status, errCode, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(status)
		if !ok || err != nil || n < 400 || n > 499 || errCode == "" {
			return nil, fmt.Errorf("decline rule %q: want STATUS:ERROR with a 4xx status, e.g. 422:DECLINED", part)
		}
		out = append(out, DeclineRule{Status: n, Error: errCode})
	}
	return out, nil
}

// The default words of a 2xx answer's "status" field.
var (
	DefaultPosted  = []string{StatusPosted}
	DefaultPending = []string{"PENDING", "ACCEPTED"}
)

// ParseWords reads a comma-separated list of status words (e.g.
// "POSTED,COMPLETED"): upper-case letters, digits and '_'.
func ParseWords(s string) ([]string, error) {
	var out []string
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		if w == "" || strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			return nil, fmt.Errorf("status word %q: want upper-case letters, digits and _, comma-separated, e.g. POSTED,COMPLETED", w)
		}
		out = append(out, w)
	}
	return out, nil
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Timeout bounds each call. Default 10s. A timed-out debit may have
	// posted: the retry uses the same key, under the kept claim.
	Timeout time.Duration
	// HTTPClient defaults to a client with sensible connection pooling. The
	// client never follows redirects: a 3xx is an answer (rejected).
	HTTPClient *http.Client
	// Declines are the answers that mean a final decline. Default
	// DefaultDeclines. Everything else that is not 2xx is retried.
	Declines []DeclineRule
	// Breaker, when set, is asked before every call (an open circuit
	// refuses at once, NotSent) and told every result.
	Breaker Breaker
	// HealthPath is what Probe asks. Default "/healthz". It is a hint, never
	// proof: the circuit's trial after an outage is one real call.
	HealthPath string
	// Posted are the values of a 2xx answer's "status" field that mean the
	// debit posted (recorded DONE). Default DefaultPosted.
	Posted []string
	// Pending are the values that mean the bank accepted the debit but has
	// not posted it yet: in progress, never DONE; the claim is kept and the
	// charge is resolved by a status enquiry or a later attempt with the same
	// key. Default DefaultPending. A 2xx with any other status, or none, is
	// ambiguous (kept, retried with the same key).
	Pending []string
	// Headers, when set, adds headers from the call's context to every
	// debit and enquiry request (the tracing package puts the W3C
	// traceparent there).
	Headers func(ctx context.Context, h http.Header)
	// Explain, when set, turns a transport error into words an operator
	// can act on ("the server's certificate is not signed by a CA we
	// trust"); "" leaves the error as it is (clientauth.Explain).
	Explain func(error) string
}

// NewClient returns a Client for the API at baseURL (http://host:port).
func NewClient(baseURL string, opts ClientOptions) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("corebank: base URL %q must be http(s)://host[:port]", redact.URL(baseURL))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		// A credential in the URL would be in the process's arguments and
		// environment for anyone on the host to read.
		return nil, fmt.Errorf("corebank: base URL %q holds user info or a query: put credentials in a header file (Authorization: Basic …) or the OAuth2 flags, not the URL", redact.URL(baseURL))
	}
	if opts.Timeout < 0 {
		return nil, errors.New("corebank: Timeout must not be negative")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	var hc http.Client
	if opts.HTTPClient != nil {
		hc = *opts.HTTPClient
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		hc.Transport = t
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if opts.Declines == nil {
		opts.Declines = DefaultDeclines
	}
	if opts.HealthPath == "" {
		opts.HealthPath = "/healthz"
	}
	if opts.Posted == nil {
		opts.Posted = DefaultPosted
	}
	if opts.Pending == nil {
		opts.Pending = DefaultPending
	}
	return &Client{base: u, http: &hc, timeout: opts.Timeout, declines: opts.Declines, breaker: opts.Breaker, health: opts.HealthPath,
		posted: opts.Posted, pending: opts.Pending, headers: opts.Headers, explain: opts.Explain}, nil
}

// Debit implements charge.Debiter.
func (c *Client) Debit(ctx context.Context, req charge.DebitRequest) (charge.DebitReceipt, error) {
	body, err := json.Marshal(DebitBody{
		AccountID: req.AccountID, ChargeType: string(req.ChargeType), Narrative: req.Narrative,
		Amount: MoneyBody{Minor: req.Amount.Minor, Currency: string(req.Amount.Currency)},
	})
	if err != nil {
		return charge.DebitReceipt{}, &charge.BankError{Kind: charge.BankRejected, NotSent: true, Err: err}
	}
	tk, status, raw, err := c.do(ctx, http.MethodPost, c.base.JoinPath("/v1/debits").String(), req.IdempotencyKey, body)
	if err != nil {
		return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: %w", req.IdempotencyKey, err)
	}
	if status >= 200 && status < 300 {
		var ok DebitResponse
		var ambiguous error
		switch err := json.Unmarshal(raw, &ok); {
		case err != nil:
			ambiguous = errors.New("unreadable answer")
		case ok.IdempotencyKey != "" && ok.IdempotencyKey != req.IdempotencyKey:
			ambiguous = fmt.Errorf("the answer names another idempotency key (%q)", charge.Clip(charge.Untrusted(ok.IdempotencyKey), maxCode))
		case slices.Contains(c.pending, ok.Status):
			// Accepted, not posted: in progress at the bank. The bank works;
			// the charge is not done. The kept claim waits for the enquiry
			// or a later attempt with the same key.
			c.record(tk, nil)
			return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: %w", req.IdempotencyKey,
				&charge.BankError{Kind: charge.BankUnavailable, Status: status, Code: ok.Status, Err: errors.New("accepted, not yet posted")})
		case !slices.Contains(c.posted, ok.Status):
			ambiguous = fmt.Errorf("status %q is neither posted nor pending", charge.Clip(charge.Untrusted(ok.Status), maxCode))
		case ok.Reference == "":
			ambiguous = errors.New("posted without a reference")
		}
		if ambiguous != nil {
			// Money may have moved: never final. The retry replays it.
			err = c.record(tk, &charge.BankError{Kind: charge.BankUnavailable, Status: status, Err: ambiguous})
			return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: %w", req.IdempotencyKey, err)
		}
		c.record(tk, nil)
		return charge.DebitReceipt{Reference: ok.Reference}, nil
	}
	err = c.record(tk, c.classify(status, raw, req.AccountID))
	return charge.DebitReceipt{}, fmt.Errorf("corebank: debit %s: %w", req.IdempotencyKey, err)
}

// Enquire implements charge.Enquirer: GET /v1/debits/{key}. A 404 is
// NOT_FOUND only with the body {"status":"NOT_FOUND"}; a bare 404 is a wrong
// URL (rejected), never a reason to post again.
func (c *Client) Enquire(ctx context.Context, key string) (charge.Enquiry, error) {
	tk, status, raw, err := c.do(ctx, http.MethodGet, c.enquiryURL(key), "", nil)
	if err != nil {
		return charge.Enquiry{}, fmt.Errorf("corebank: enquiry %s: %w", key, err)
	}
	var st StatusResponse
	readable := json.Unmarshal(raw, &st) == nil
	switch {
	case readable && status < 300 && st.IdempotencyKey != key,
		readable && status == http.StatusNotFound && st.Status == StatusNotFound && st.IdempotencyKey != key:
		// An answer about another key (or about no key) says nothing about
		// ours: never DONE, never FAILED, never "post again".
		err = c.record(tk, &charge.BankError{Kind: charge.BankRejected, Status: status, Code: "ENQUIRY_KEY_MISMATCH",
			Err: fmt.Errorf("the status answer names key %q, not ours", charge.Clip(charge.Untrusted(st.IdempotencyKey), maxCode))})
	case status == http.StatusOK && readable && st.Status == StatusPosted && st.Reference != "":
		c.record(tk, nil)
		return charge.Enquiry{State: charge.DebitPosted, Reference: st.Reference}, nil
	case status == http.StatusOK && readable && st.Status == StatusInProgress:
		c.record(tk, nil)
		return charge.Enquiry{State: charge.DebitInProgress}, nil
	case status == http.StatusOK && readable && st.Status == StatusDeclined:
		c.record(tk, nil)
		return charge.Enquiry{State: charge.DebitDeclined, Decline: &charge.DeclineError{Code: charge.Clip(charge.Untrusted(st.Code), maxCode), Message: charge.Untrusted(st.Message)}}, nil
	case status == http.StatusNotFound && readable && st.Status == StatusNotFound:
		c.record(tk, nil)
		return charge.Enquiry{State: charge.DebitNotFound}, nil
	case status >= 200 && status < 300:
		err = c.record(tk, &charge.BankError{Kind: charge.BankUnavailable, Status: status, Err: errors.New("unreadable status answer")})
	default:
		err = c.classify(status, raw)
		var d *charge.DeclineError
		if errors.As(err, &d) { // a decline rule matched the enquiry's own answer: not an answer about the debit
			err = &charge.BankError{Kind: charge.BankRejected, Status: status, Code: d.Code}
		}
		err = c.record(tk, err)
	}
	return charge.Enquiry{}, fmt.Errorf("corebank: enquiry %s: %w", key, err)
}

// enquiryURL is GET /v1/debits/{key} with the key escaped as one path
// segment: a charge id may hold '/' and '.', and a cleaned or split path
// would ask about another key.
func (c *Client) enquiryURL(key string) string {
	u := *c.base.JoinPath("/v1/debits")
	u.RawPath = u.EscapedPath() + "/" + url.PathEscape(key)
	u.Path += "/" + key
	return u.String()
}

// Probe asks the bank's health endpoint; nil when it answers 2xx. The
// circuit breaker calls it while open.
func (c *Client) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base.JoinPath(c.health).String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health %s: HTTP %d", c.health, resp.StatusCode)
	}
	return nil
}

// do sends one request and reads the answer. Its error is a
// *charge.BankError (NotSent when the circuit is open or the connection was
// refused) or, when the caller's ctx ended, that context error.
func (c *Client) do(ctx context.Context, method, u, key string, body []byte) (circuit.Ticket, int, []byte, error) {
	var tk circuit.Ticket
	if c.breaker != nil {
		var err error
		if tk, err = c.breaker.Allow(); err != nil {
			return tk, 0, nil, &charge.BankError{Kind: charge.BankUnavailable, NotSent: true, Err: err}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	// wrote is set once any byte of this request may have left: the
	// transport's first write of the headers, on any connection. Only a
	// request that never got that far is NotSent.
	var wrote atomic.Bool
	cctx = httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { wrote.Store(true) },
		WroteHeaders:     func() { wrote.Store(true) },
	})
	hreq, err := http.NewRequestWithContext(cctx, method, u, rd)
	if err != nil {
		c.abandon(tk) // no call made: a trial is given back, not held
		return tk, 0, nil, &charge.BankError{Kind: charge.BankRejected, NotSent: true, Err: err}
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
		// No silent re-send: Go's transport replays a request that carries
		// an Idempotency-Key on a new connection when a reused one drops,
		// and a refused re-dial would then read as "never sent" although the
		// first copy reached the bank. Without GetBody it cannot replay; our
		// own retry, under the kept claim, sends the same key again.
		hreq.GetBody = nil
	}
	if key != "" {
		hreq.Header.Set(IdempotencyHeader, key)
	}
	if c.headers != nil {
		c.headers(ctx, hreq.Header)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			// Our caller gave up (shutdown, lost lease): it may have posted,
			// and it says nothing about the bank.
			c.abandon(tk)
			return tk, 0, nil, fmt.Errorf("%w (the request may have reached the bank)", ctx.Err())
		}
		if c.explain != nil {
			if why := c.explain(err); why != "" {
				err = fmt.Errorf("%s: %w", why, err)
			}
		}
		return tk, 0, nil, c.record(tk, &charge.BankError{Kind: charge.BankUnavailable, NotSent: !wrote.Load() && neverSent(err), Err: err})
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		if ctx.Err() != nil {
			c.abandon(tk)
			return tk, 0, nil, fmt.Errorf("%w (the request reached the bank)", ctx.Err())
		}
		return tk, 0, nil, c.record(tk, &charge.BankError{Kind: charge.BankUnavailable, Status: resp.StatusCode, Err: fmt.Errorf("read answer: %w", err)})
	}
	return tk, resp.StatusCode, raw, nil
}

// neverSent reports whether a transport error says the connection could not
// be made. It proves nothing alone: a transport that re-dialled after
// writing the request on another connection fails the same way (do checks
// that no byte was written).
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	// A TLS handshake that failed, and a token that could not be had,
	// come before the request: no byte of it was sent.
	var cve *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknown x509.UnknownAuthorityError
	var notSent interface{ NotSent() bool }
	return errors.As(err, &cve) || errors.As(err, &alert) || errors.As(err, &unknown) ||
		(errors.As(err, &notSent) && notSent.NotSent())
}

// maxAnswer bounds what is read of a bank's answer: a debit's or an
// enquiry's answer is a small JSON object; anything longer is not read
// into memory (and, cut, does not parse: a retry with the same key).
const maxAnswer = 64 << 10

// maxCode bounds a code word taken from an answer.
const maxCode = 64

// classify is THE table of non-2xx answers: a configured decline is final;
// everything else is retried with the same key. The bank's text is masked
// (accounts, and digit runs that may be account numbers) before it goes
// anywhere: records, DLQ reasons, logs.
func (c *Client) classify(status int, raw []byte, accounts ...string) error {
	var e ErrorResponse
	_ = json.Unmarshal(raw, &e)
	declined := false
	for _, r := range c.declines {
		declined = declined || (status == r.Status && e.Error == r.Error)
	}
	e.Error = charge.Clip(charge.Untrusted(e.Error, accounts...), maxCode)
	e.Code = charge.Clip(charge.Untrusted(e.Code, accounts...), maxCode)
	e.Message = charge.Untrusted(e.Message, accounts...)
	if declined {
		return &charge.DeclineError{Code: cmp.Or(e.Code, e.Error), Message: e.Message}
	}
	be := &charge.BankError{Kind: charge.BankRejected, Status: status, Code: e.Error}
	if e.Message != "" {
		be.Err = errors.New(e.Message)
	}
	switch {
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusLocked,
		status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		be.Kind = charge.BankUnavailable
	}
	return be
}

// abandon tells the breaker that an allowed call ended without a verdict.
func (c *Client) abandon(tk circuit.Ticket) {
	if c.breaker != nil {
		c.breaker.Abandon(tk)
	}
}

// record tells the breaker about a result and returns err. A decline is a
// working bank's answer.
func (c *Client) record(tk circuit.Ticket, err error) error {
	if c.breaker != nil {
		if errors.Is(err, charge.ErrPermanent) {
			c.breaker.Record(tk, nil)
		} else {
			c.breaker.Record(tk, err)
		}
	}
	return err
}
