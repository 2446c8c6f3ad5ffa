// Package webhook is a pre-debit notification channel: an HTTP POST of the
// documented notice (charge.Notice) to a URL the bank's customer-messaging
// system serves, with Idempotency-Key "<chargeId>:pre-debit", so that the
// receiver can drop a repeat (a resend by renotify, or a retry after an
// answer that was lost). In notice-first mode the advance notice
// (charge.AdvanceNotice) is posted the same way before the debit, with
// Idempotency-Key "<chargeId>:advance-notice"; a failed one means no debit.
//
// Only a 2xx is "sent". Every other answer, and no answer, is a failed
// notification: the charge is recorded DEBITED_NOTIFICATION_FAILED for an
// operator's follow-up — never a reason to debit again.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/finedge/idempotent-consumer/internal/redact"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
)

// IdempotencyHeader carries the notification key.
const IdempotencyHeader = "Idempotency-Key"

// Options configure a Notifier. Zero fields take the defaults.
type Options struct {
	// URL receives the POST. Required: http(s)://host[:port]/path.
	URL string
	// Timeout bounds one POST. Default 5s.
	Timeout time.Duration
	// HTTPClient carries the transport (TLS, client certificates) and its
	// authentication. Default: a client on a clone of Go's default
	// transport. Redirects are never followed (a 3xx is a failure).
	HTTPClient *http.Client
	// Headers, when set, adds headers from the call's context (tracing).
	Headers func(ctx context.Context, h http.Header)
	// Now is the clock of the notice's debitedAt. Default time.Now.
	Now func() time.Time
}

// Notifier implements charge.Notifier over HTTP.
type Notifier struct {
	url     string
	http    *http.Client
	timeout time.Duration
	headers func(context.Context, http.Header)
	now     func() time.Time
}

var (
	_ charge.Notifier        = (*Notifier)(nil)
	_ charge.NoticeSender    = (*Notifier)(nil)
	_ charge.AdvanceNotifier = (*Notifier)(nil)
)

// New checks o and returns a Notifier.
func New(o Options) (*Notifier, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("webhook: URL %q must be http(s)://host[:port]/path", redact.URL(o.URL))
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		// A credential in the URL (user info, or a query such as
		// ?token=…) would be in the process's arguments and environment,
		// visible in ps, and in every log line naming the URL.
		return nil, fmt.Errorf("webhook: URL %q holds user info, a query or a fragment: put credentials in a header file or the OAuth2 flags, not the URL", redact.URL(o.URL))
	}
	if o.Timeout < 0 {
		return nil, errors.New("webhook: Timeout must not be negative")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	var hc http.Client
	if o.HTTPClient != nil {
		hc = *o.HTTPClient
	} else {
		hc.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Notifier{url: u.String(), http: &hc, timeout: o.Timeout, headers: o.Headers, now: o.Now}, nil
}

// Error is a notification the receiver did not accept, or did not answer.
type Error struct {
	// Status is the HTTP status, 0 when there was no answer.
	Status int
	// Body is the start of the answer's body (clipped, control characters
	// removed).
	Body string
	Err  error
}

func (e *Error) Error() string {
	switch {
	case e.Status == 0:
		return fmt.Sprintf("webhook: no answer: %v", e.Err)
	case e.Body != "":
		return fmt.Sprintf("webhook: HTTP %d: %s", e.Status, e.Body)
	}
	return fmt.Sprintf("webhook: HTTP %d", e.Status)
}

func (e *Error) Unwrap() error { return e.Err }

// NotifyPreDebit implements charge.Notifier: one POST of the notice.
func (n *Notifier) NotifyPreDebit(ctx context.Context, c charge.Charge, receipt charge.DebitReceipt) error {
	return n.send(ctx, charge.NoticeOf(c, receipt, n.now()), c.AccountID)
}

// SendNotice implements charge.NoticeSender.
func (n *Notifier) SendNotice(ctx context.Context, notice charge.Notice) error {
	return n.send(ctx, notice)
}

// NotifyAdvance implements charge.AdvanceNotifier: one POST of the advance
// notice (charge.AdvanceNotice) with Idempotency-Key
// "<chargeId>:advance-notice". Only a 2xx is sent; without it the charge
// is not debited, and the notice is posted again later under the same key.
func (n *Notifier) NotifyAdvance(ctx context.Context, notice charge.AdvanceNotice) error {
	body, err := notice.Marshal()
	if err != nil {
		return err
	}
	return n.post(ctx, body, notice.NotificationKey)
}

func (n *Notifier) send(ctx context.Context, notice charge.Notice, accounts ...string) error {
	body, err := notice.Marshal()
	if err != nil {
		return err
	}
	return n.post(ctx, body, notice.NotificationKey, accounts...)
}

// post sends body under key; the answer's text is masked for accounts.
func (n *Notifier) post(ctx context.Context, body []byte, key string, accounts ...string) error {
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(IdempotencyHeader, key)
	if n.headers != nil {
		n.headers(ctx, req.Header)
	}
	resp, err := n.http.Do(req)
	if err != nil {
		return &Error{Err: redact.Error(err, n.url)}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return &Error{Status: resp.StatusCode, Body: charge.Clip(charge.Untrusted(string(raw), accounts...), 256)}
}
