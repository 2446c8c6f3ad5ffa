// Package idemhttp is net/http middleware for the IETF Idempotency-Key
// header (draft-ietf-httpapi-idempotency-key-header) on any store of
// package idempotency: a request that carries a key runs its handler at most
// once per key, and every retry gets the first response back.
//
// For each request whose method needs a key (Options.Methods, default POST
// and PATCH):
//
//   - no client identified (Options.Scope returns ""): 401, problem+json;
//     the handler does not run and nothing is claimed;
//   - no key (or an empty or blank one, or more than one, also merged
//     into one line as "a, b"): 400, problem+json; the
//     handler does not run. A missing key is never defaulted or hashed:
//     requests without one would all share one record;
//   - a body larger than Options.MaxBodyBytes: 413 before anything is
//     claimed;
//   - the key claimed for another request fingerprint: 422. The fingerprint
//     is SHA-256 (HMAC-SHA-256 with Options.Fingerprinter) over the method,
//     the escaped path, the raw query and the body; it is checked on every
//     request, including a replay of a finished key;
//   - the key held by a request still running: 409 with Retry-After;
//   - the key finished: the first response, replayed: its status, the
//     headers in Options.StoreHeaders (default Content-Type and Location)
//     and its body, with "Idempotent-Replayed: true";
//   - else the handler runs, under a claim whose lease a heartbeat extends
//     for as long as it runs (a slow handler is never taken over by a
//     retry), and its response is recorded, then sent. The claim is in the
//     request's context (RunFrom): Run.Reclaimed tells a handler that an
//     earlier attempt crashed mid-request and may have had its effect.
//
// A key's lifetime is the Guard's retention (idempotency.Options.Retention,
// default 30 days) from the record's last write: until then every request
// with the key gets the first response (or 409 / 422); after it the key is
// new again. The key is kept per Options.Namespace and per client
// (Options.Scope), so that one client cannot replay another's response:
// Middleware refuses to start without a Scope unless Options.Unscoped says
// that every client may share one key space, and a request whose Scope is
// "" (no client identified) gets 401 without the handler running.
//
// Every response the handler finishes is stored, 5xx included: a 500
// written after the payment was made must not let the retry pay again.
// A handler that knows nothing happened (a load shedder's 503, a
// validation error) says so with Options.NotStarted: that response is sent,
// not stored, and a retry of the same request runs the handler again at
// once (the key keeps the request's fingerprint: another body with it is
// still 422). A handler that panics leaves the
// key FAILED (retries get 500, "first request failed"; use a new key)
// and the panic goes on up the stack. A response larger than
// Options.MaxResponseBytes is sent but not stored: the key is recorded done
// and retries get 500, "response not stored" — the handler never runs
// twice. A client that goes away does not stop the handler: it runs on a
// context that the request's cancellation does not reach (its values are
// kept), and its response is recorded for the retry.
package idemhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Defaults of Options.
const (
	DefaultHeader           = "Idempotency-Key"
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxResponseBytes = 160 << 10
	DefaultNamespace        = "http"
	// MaxMaxResponseBytes is the largest MaxResponseBytes accepted: a
	// body of that size, base64 in the stored JSON (4/3 of it), leaves
	// StoreHeadersRoom of driver.MaxResultBytes for the status and the
	// stored headers.
	MaxMaxResponseBytes = (driver.MaxResultBytes - StoreHeadersRoom) / 4 * 3
	// StoreHeadersRoom is the part of a stored response kept for its
	// status and headers at MaxMaxResponseBytes.
	StoreHeadersRoom = 32 << 10
	// MaxKeyLength is the longest key accepted, in bytes.
	MaxKeyLength = 255
	// ReplayedHeader marks a replayed response.
	ReplayedHeader = "Idempotent-Replayed"
)

// Options configure Middleware. Guard is required, and so is Scope unless
// Unscoped is set; the zero value of every other field takes its default.
type Options struct {
	// Guard claims the keys; its Retention is a key's lifetime and its
	// Lease how long a crashed server's key stays 409 before a retry may
	// run the handler again.
	Guard *idempotency.Guard
	// Methods that need a key. Default POST and PATCH. Other methods pass
	// through untouched. They are upper-cased ("post" guards POST); a
	// name that is not an HTTP token is ErrInvalid.
	Methods []string
	// Header is the request header that carries the key. Default
	// "Idempotency-Key". Its value may be a structured-field string (in
	// double quotes, as the draft writes it) or bare.
	Header string
	// StoreHeaders are the response headers stored and replayed. Default
	// Content-Type and Location.
	StoreHeaders []string
	// MaxBodyBytes bounds the request body read to fingerprint it (and
	// handed to the handler). Larger: 413. Default 1 MiB; math.MaxInt64
	// (no bound) is taken as math.MaxInt64-1. The body is held in memory.
	MaxBodyBytes int64
	// MaxResponseBytes bounds the response body stored for replay.
	// Default 160 KiB; at most MaxMaxResponseBytes (stored as base64 in
	// JSON with the headers, it stays under driver.MaxResultBytes), else
	// ErrInvalid. A larger response is sent, not stored; so is one whose
	// stored headers take it over driver.MaxResultBytes.
	MaxResponseBytes int
	// Namespace separates these keys from other users of the store.
	// Default "http". It must not hold ":".
	Namespace string
	// Scope names the client a request comes from (the authenticated
	// principal: a client id, an account; never a value the client picks
	// freely): keys are kept per scope, so that a client who learns
	// another's key and request body runs the handler — its authorisation
	// too — under its own scope instead of getting the other's stored
	// response. It is required (else ErrInvalid) unless Unscoped is set. A
	// request for which it returns "" (no client identified: the
	// authentication in front of the middleware let it through) gets 401,
	// problem "client-unidentified", with Challenge as its
	// WWW-Authenticate; nothing is claimed and the handler does not run.
	Scope func(*http.Request) string
	// Unscoped, set explicitly, keeps every client's keys in one space
	// (Scope must then be nil). What it gives up: any client that learns
	// another's key and body (a shared log, a proxy, a guess at a
	// predictable key) gets that client's stored response — its status,
	// body and Location — without the handler, and so without the
	// handler's authorisation, running. Only for a server with one client
	// or whose clients may all read each other's responses.
	Unscoped bool
	// Challenge is the WWW-Authenticate value of the 401 for a request
	// whose Scope is "" (e.g. `Bearer realm="payments"`; RFC 9110 wants
	// one with every 401). Default: none sent.
	Challenge string
	// Fingerprinter keys the request fingerprint (HMAC-SHA-256): a stored
	// fingerprint then tells nothing about a body. Default nil: plain
	// SHA-256. A record written under one of its previous keys, or
	// unkeyed before it, is matched under that key (Fingerprinter.Match):
	// rotating or adding a key keeps replaying.
	Fingerprinter *idempotency.Fingerprinter
	// NotStarted, when set, reports whether a response means the handler
	// had no effect (e.g. a 503 from a load shedder before any work):
	// such a response is sent but not stored, and the key is released for
	// the retry at once. Default: every response is stored.
	NotStarted func(status int) bool
	// ExpectedDuration is how long the handler usually takes. A request
	// whose key is still being handled gets 409 with Retry-After: what is
	// left of that since the first request began, at least 1 s and never
	// more than the rest of the key's lease (after which a retry may run
	// the handler again). Default 0: a running estimate, the 90th
	// percentile of the last 32 requests handled (1 s before the first),
	// one for every route behind the middleware: give routes of very
	// different durations a middleware each, or set it.
	ExpectedDuration time.Duration
	// Logger gets a handler's panic value, with the panic id that the
	// key's record and the retrying clients get instead of the value.
	// Default slog.Default().
	Logger *slog.Logger
}

// Middleware returns the middleware, or idempotency.ErrInvalid for a nil
// Guard, no Scope without Unscoped (or both), or a bad option.
func Middleware(opts Options) (func(http.Handler) http.Handler, error) {
	if opts.Guard == nil {
		return nil, fmt.Errorf("%w: idemhttp needs a Guard", idempotency.ErrInvalid)
	}
	if opts.Scope == nil && !opts.Unscoped {
		return nil, fmt.Errorf("%w: idemhttp needs a Scope (the authenticated client of a request: keys are kept per client, so that no client replays another's response); set Unscoped only if every client may get every other's responses", idempotency.ErrInvalid)
	}
	if opts.Scope != nil && opts.Unscoped {
		return nil, fmt.Errorf("%w: idemhttp: Scope and Unscoped both set", idempotency.ErrInvalid)
	}
	if strings.ContainsAny(opts.Challenge, "\r\n") {
		return nil, fmt.Errorf("%w: idemhttp: Challenge holds a line break", idempotency.ErrInvalid)
	}
	if opts.MaxBodyBytes < 0 || opts.MaxResponseBytes < 0 {
		return nil, fmt.Errorf("%w: negative MaxBodyBytes or MaxResponseBytes", idempotency.ErrInvalid)
	}
	if opts.Methods == nil {
		opts.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	// Methods are case-sensitive on the wire, but a configured "post"
	// means POST: guard the canonical method, never nothing.
	methods := make([]string, len(opts.Methods))
	for i, m := range opts.Methods {
		if !isToken(m) {
			return nil, fmt.Errorf("%w: method %q is not an HTTP token", idempotency.ErrInvalid, m)
		}
		methods[i] = strings.ToUpper(m)
	}
	opts.Methods = methods
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Header == "" {
		opts.Header = DefaultHeader
	}
	if opts.StoreHeaders == nil {
		opts.StoreHeaders = []string{"Content-Type", "Location"}
	}
	for i, h := range opts.StoreHeaders {
		opts.StoreHeaders[i] = http.CanonicalHeaderKey(h)
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	// One more byte than the bound is read to tell a larger body: keep
	// that count from overflowing (math.MaxInt64 means no bound).
	opts.MaxBodyBytes = min(opts.MaxBodyBytes, math.MaxInt64-1)
	if opts.MaxResponseBytes == 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if opts.MaxResponseBytes > MaxMaxResponseBytes {
		return nil, fmt.Errorf("%w: MaxResponseBytes %d: a stored response (its body base64, 4/3 of it, with its headers) must fit the store's %d bytes; at most %d",
			idempotency.ErrInvalid, opts.MaxResponseBytes, driver.MaxResultBytes, MaxMaxResponseBytes)
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.ExpectedDuration < 0 {
		return nil, fmt.Errorf("%w: negative ExpectedDuration", idempotency.ErrInvalid)
	}
	if strings.Contains(opts.Namespace, ":") {
		return nil, fmt.Errorf("%w: namespace %q holds ':'", idempotency.ErrInvalid, opts.Namespace)
	}
	return func(next http.Handler) http.Handler {
		return &middleware{opts: opts, next: next}
	}, nil
}

type middleware struct {
	opts Options
	next http.Handler

	mu        sync.Mutex
	durations [32]time.Duration // the last handled requests', a ring
	handled   int
}

// took keeps one handled request's duration for expected.
func (m *middleware) took(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.durations[m.handled%len(m.durations)] = d
	m.handled++
}

// expected is how long a request takes: the option, else the 90th
// percentile of the last handled ones, else 1 s.
func (m *middleware) expected() time.Duration {
	if m.opts.ExpectedDuration > 0 {
		return m.opts.ExpectedDuration
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.handled == 0 {
		return time.Second
	}
	// The 90th percentile (nearest rank): one request that hung does not
	// set every Retry-After to the lease while 31 since took seconds.
	d := slices.Clone(m.durations[:min(m.handled, len(m.durations))])
	slices.Sort(d)
	return d[(len(d)*9+9)/10-1]
}

// retryAfter is the Retry-After of a 409 for res, a key in progress: what
// is left of the expected duration since the key's first claim (a reclaim's
// start is not kept: the whole of it), at least 1 s, at most the rest of
// the lease. A CreatedAt ahead of this server's clock (another server's
// clock, ahead by up to the guard's SkewMargin) counts as no time passed,
// never as time to add.
func (m *middleware) retryAfter(res idempotency.TypedResult[response]) time.Duration {
	left := m.expected()
	if res.Record.Attempt <= 1 && !res.Record.CreatedAt.IsZero() {
		left -= max(m.opts.Guard.Now().Sub(res.Record.CreatedAt), 0)
	}
	return max(min(left, res.RetryAfter), time.Second)
}

// response is a response as stored for replay.
type response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// NotStored says why the response was not kept (too large).
	NotStored string `json:"not_stored,omitempty"`
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(m.opts.Methods, r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	scope := ""
	if m.opts.Scope != nil {
		if scope = m.opts.Scope(r); scope == "" {
			if m.opts.Challenge != "" {
				w.Header().Set("WWW-Authenticate", m.opts.Challenge)
			}
			problem(w, http.StatusUnauthorized, "client-unidentified", "Client not identified",
				"a "+r.Method+" request with an "+m.opts.Header+" must come from an identified client: keys are kept per client")
			return
		}
	}
	key, msg := m.key(r, scope)
	if msg != "" {
		problem(w, http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key missing or invalid", msg)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.opts.MaxBodyBytes+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "body-unreadable", "Request body could not be read", err.Error())
		return
	}
	if int64(len(body)) > m.opts.MaxBodyBytes {
		problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large",
			fmt.Sprintf("a request with an %s may have a body of at most %d bytes", m.opts.Header, m.opts.MaxBodyBytes))
		return
	}
	_ = r.Body.Close()
	parts := []string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(body)}
	fp := m.opts.Fingerprinter.Sum(parts...)

	var (
		ran      response // what the handler wrote, this time
		rec      *recorder
		panicVal any
		panicked bool
	)
	work := func(ctx context.Context, run idempotency.Run) (response, error) {
		req := r.Clone(context.WithValue(ctx, runKey{}, run))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		rec = newRecorder(w, m.opts.MaxResponseBytes)
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					panicVal, panicked = p, true
					// The value may hold anything (a connection string, an
					// account number): it goes to the server's log only,
					// under an id that the record and the client get.
					id := panicID()
					m.opts.Logger.Error("idemhttp: handler panicked", "panic_id", id, "panic", fmt.Sprint(p))
					err = fmt.Errorf("idemhttp: handler panicked (panic id %s): %w", id, idempotency.ErrPermanent)
				}
			}()
			began := m.opts.Guard.Now()
			m.next.ServeHTTP(rec, req)
			m.took(m.opts.Guard.Now().Sub(began))
			return nil
		}()
		if err != nil {
			return response{}, err
		}
		ran = rec.response()
		if m.opts.NotStarted != nil && m.opts.NotStarted(ran.Status) {
			return response{}, fmt.Errorf("idemhttp: status %d: %w", ran.Status, idempotency.ErrNotStarted)
		}
		if rec.overflow {
			return response{Status: ran.Status, NotStored: fmt.Sprintf("the response body had more than %d bytes", m.opts.MaxResponseBytes)}, nil
		}
		stored := ran
		stored.Header = http.Header{}
		for _, h := range m.opts.StoreHeaders {
			if v := ran.Header.Values(h); len(v) > 0 {
				stored.Header[h] = slices.Clone(v)
			}
		}
		// The stored headers count against the store's limit too: what
		// is decided storable here is stored.
		if b, err := (responseCodec{}).Encode(stored); err == nil && len(b) > driver.MaxResultBytes {
			return response{Status: ran.Status, NotStored: fmt.Sprintf("the response with its stored headers encodes to %d bytes, more than the %d bytes a store keeps", len(b), driver.MaxResultBytes)}, nil
		}
		return stored, nil
	}
	hb := &heartbeat{every: max(m.opts.Guard.Lease()/3, 10*time.Millisecond)}
	// The handler and the record run on a context the client's going away
	// does not cancel: what it started is finished and recorded.
	ctx := context.WithoutCancel(r.Context())
	topts := idempotency.DoOptions{Namespace: m.opts.Namespace, Codec: responseCodec{}, Heartbeat: hb}
	res, err := idempotency.DoTyped(ctx, m.opts.Guard, key, fp, work, topts)
	var notRun *idempotency.NotRunError // the outcome answers it below
	if errors.As(err, &notRun) {
		err = nil
	}
	if err == nil && res.Outcome == idempotency.Conflict && res.Record.Fingerprint != fp {
		// Written under another fingerprint key (a previous one, or none
		// before keys): the same request if the stored fingerprint matches
		// under that key, and then it is the one to claim with — a key
		// rotation keeps replaying. A key this server does not hold: 422.
		if same, merr := m.opts.Fingerprinter.Match(res.Record.Fingerprint, parts...); merr == nil && same {
			res, err = idempotency.DoTyped(ctx, m.opts.Guard, key, res.Record.Fingerprint, work, topts)
			if errors.As(err, &notRun) {
				err = nil
			}
		}
	}
	if panicked {
		panic(panicVal)
	}
	switch res.Outcome {
	case idempotency.Acquired, idempotency.Reclaimed, idempotency.Unfinished, idempotency.LeaseLost:
		// The handler ran: its response goes to the client whatever
		// became of the record (a store that could not be reached to
		// record it, a response too large to keep).
		if rec != nil {
			rec.flush(ran)
			return
		}
	case idempotency.DuplicateDone:
		if err != nil {
			detail := "the first request with this key was processed, but its response could not be replayed: " + err.Error()
			problem(w, http.StatusInternalServerError, "response-not-stored", "Response not stored", detail)
			return
		}
		if res.Value.NotStored != "" {
			problem(w, http.StatusInternalServerError, "response-not-stored", "Response not stored",
				"the first request with this key was processed, but its response was not stored: "+res.Value.NotStored)
			return
		}
		replay(w, res.Value)
		return
	case idempotency.DuplicateInProgress:
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(m.retryAfter(res).Seconds()))))
		problem(w, http.StatusConflict, "request-in-progress", "A request with this key is in progress",
			"a request with this Idempotency-Key is being processed; retry after it finishes")
		return
	case idempotency.Conflict:
		problem(w, http.StatusUnprocessableEntity, "key-reused", "Idempotency-Key reused",
			"this Idempotency-Key was used with another request (method, path, query or body)")
		return
	case idempotency.DuplicateFailed:
		problem(w, http.StatusInternalServerError, "first-request-failed", "The first request with this key failed",
			"the first request with this Idempotency-Key failed without a response ("+res.Record.Detail+"); send a new key to try again")
		return
	}
	if err != nil {
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "store-unavailable", "Idempotency store unavailable", "try again")
		return
	}
	problem(w, http.StatusInternalServerError, "internal", "Internal error", "outcome "+res.Outcome.String())
}

// isToken reports whether s is an RFC 9110 token (a method name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// panicID names one panic: random, so that it tells nothing but where to
// look in the log.
func panicID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// responseCodec stores a response as JSON, as the default codec does
// (same name: either reads the other's records), but without escaping
// HTML characters: a Location full of '&' stays one byte a character.
type responseCodec struct{}

func (responseCodec) Name() string { return "json" }

func (responseCodec) Encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func (responseCodec) Decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the response")
	}
	return nil
}

// runKey is the context key of the idempotency.Run handed to the handler.
type runKey struct{}

// RunFrom returns the claim the handler runs under: the middleware puts it
// in the request's context. Its Reclaimed is true when an earlier attempt
// with the key claimed it and did not finish (a server that crashed
// mid-request): that attempt's effect may have happened, so a handler that
// pays (or does anything else once) checks downstream first — with a
// downstream idempotency key derived from the request's key and
// Run.Generation, or by looking the payment up — before doing it again.
// It returns false outside the middleware (a method that needs no key).
func RunFrom(ctx context.Context) (idempotency.Run, bool) {
	run, ok := ctx.Value(runKey{}).(idempotency.Run)
	return run, ok
}

// key is the request's key in its scope, or why there is none.
func (m *middleware) key(r *http.Request, scope string) (string, string) {
	vs := r.Header.Values(m.opts.Header)
	if len(vs) != 1 {
		return "", fmt.Sprintf("a %s request needs exactly one %s header", r.Method, m.opts.Header)
	}
	k := strings.TrimSpace(vs[0])
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	} else if strings.Contains(k, ",") {
		// Two fields merged into one line by an intermediary ("a, b",
		// RFC 9110 §5.3): more than one key. (A quoted key may hold a
		// comma; a merged pair of quoted keys holds a quote, refused below.)
		return "", fmt.Sprintf("a %s request needs exactly one %s header", r.Method, m.opts.Header)
	}
	if strings.TrimSpace(k) == "" || len(k) > MaxKeyLength {
		return "", fmt.Sprintf("%s must have 1 to %d characters", m.opts.Header, MaxKeyLength)
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e || k[i] == '"' || k[i] == '\\' {
			return "", fmt.Sprintf("%s must be printable ASCII without quotes or backslashes", m.opts.Header)
		}
	}
	if m.opts.Scope != nil {
		k = strconv.Itoa(len(scope)) + ":" + scope + ":" + k
	}
	return k, ""
}

func replay(w http.ResponseWriter, resp response) {
	for h, vs := range resp.Header {
		w.Header()[h] = vs
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// problem writes an RFC 9457 problem.
func problem(w http.ResponseWriter, status int, kind, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":   "https://github.com/finedge/idempotent-consumer/blob/main/docs/library/http.md#" + kind,
		"title":  title,
		"status": status,
		"detail": detail,
	})
}

// recorder buffers the handler's response up to max bytes of body; past
// them it sends what it has and passes the rest through (overflow: the
// response is not stored). A Flush sends the head and what is buffered
// and passes the rest through too, still recording it (sent). Unwrap gives
// http.ResponseController the writer underneath.
type recorder struct {
	w        http.ResponseWriter
	max      int
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool // the body is larger than max: not stored
	sent     bool // the head has gone to the client
}

func newRecorder(w http.ResponseWriter, limit int) *recorder {
	return &recorder{w: w, max: limit, header: http.Header{}}
}

func (c *recorder) Header() http.Header {
	if c.sent {
		return c.w.Header()
	}
	return c.header
}

func (c *recorder) WriteHeader(code int) {
	if c.status != 0 {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// Informational (103 Early Hints): to the client now, with the
		// headers set so far, as net/http sends it; not the response's
		// status, and never replayed.
		for h, vs := range c.header {
			c.w.Header()[h] = vs
		}
		c.w.WriteHeader(code)
		return
	}
	c.status = code
}

func (c *recorder) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if !c.overflow && c.body.Len()+len(p) > c.max {
		c.overflow = true
		if !c.sent {
			if err := c.send(); err != nil {
				return 0, err
			}
		}
		c.body.Reset()
	}
	if !c.sent {
		return c.body.Write(p)
	}
	if !c.overflow {
		c.body.Write(p)
	}
	return c.w.Write(p)
}

// send sends the head and the body buffered so far.
func (c *recorder) send() error {
	c.sent = true
	c.sendHead()
	_, err := c.w.Write(c.body.Bytes())
	return err
}

// FlushError sends what the handler wrote so far to the client and
// flushes it (http.ResponseController's Flush). The response is still
// recorded for the retries; the first client gets it as it is written.
func (c *recorder) FlushError() error {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if !c.sent {
		if err := c.send(); err != nil {
			return err
		}
	}
	return http.NewResponseController(c.w).Flush()
}

// Flush is FlushError for http.Flusher.
func (c *recorder) Flush() { _ = c.FlushError() }

// Unwrap is the writer underneath, for http.ResponseController (deadlines,
// full duplex). What is written to it directly, or to a hijacked
// connection, is not recorded.
func (c *recorder) Unwrap() http.ResponseWriter { return c.w }

func (c *recorder) sendHead() {
	for h, vs := range c.header {
		c.w.Header()[h] = vs
	}
	c.w.WriteHeader(c.status)
}

func (c *recorder) response() response {
	return response{Status: max(c.status, http.StatusOK), Header: c.header.Clone(), Body: bytes.Clone(c.body.Bytes())}
}

// flush sends the response the handler wrote, once.
func (c *recorder) flush(resp response) {
	if c.sent {
		return // sent while it was written
	}
	if resp.Status == 0 {
		resp = c.response()
	}
	for h, vs := range resp.Header {
		c.w.Header()[h] = vs
	}
	c.w.WriteHeader(resp.Status)
	_, _ = c.w.Write(resp.Body)
}

// heartbeat extends the lease every so often while the handler runs.
type heartbeat struct{ every time.Duration }

func (h *heartbeat) Register(beat func(ctx context.Context) error) (unregister func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(h.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), h.every)
				_ = beat(ctx)
				cancel()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); wg.Wait() }) }
}
