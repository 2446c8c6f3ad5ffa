// Package console is the operators' web console: the month-end overview
// (queue depth and age, DLQ by reason, records by state, stuck claims, the
// consumer's circuit, recent throughput), the DLQ, one charge with its
// audit trail, and the one-charge actions (redrive, reopen, renotify) behind
// a confirmation, each written to an append-only audit trail with the
// signed-in operator.
//
// Pages are rendered on the server (html/template); one small script
// refreshes the overview. There is no anonymous access: an Authenticator
// (a trusted proxy's header, or static tokens) names every request's
// person and role, viewers cannot act, every action needs the session's
// CSRF token, and actions are rate-limited per person. Every answer carries
// a strict Content-Security-Policy. Account numbers are masked everywhere.
package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/finedge/idempotent-consumer/app/audit"
	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/app/service/status"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/queue"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Console. Queue, Store, Auth and Audit are required.
type Options struct {
	// Backend names the backend (status's description of it).
	Backend string
	Queue   queue.Operator
	Store   driver.Store
	// MetricsURL is a consumer's /metrics, for its circuit ("" to skip).
	MetricsURL string
	// Retention is the records' retention, as serve's (default
	// idempotency.DefaultRetention): a reopened record is kept this long,
	// and a redrive holds back entries older than it less a day.
	Retention time.Duration
	// Renotifier sends a missed notice again; nil: renotify is not offered.
	Renotifier *operate.Renotifier
	Auth       Authenticator
	Audit      *AuditLog
	// Approvals are the proposals beside the audit trail (bulk actions,
	// four-eyes); nil: bulk actions are not offered, and nothing needs a
	// second operator.
	Approvals *approval.Book
	Logger    *slog.Logger // default: discard
	Now       func() time.Time
	// ActionsPerMinute and ActionBurst limit each person's actions
	// (defaults 10 and 5).
	ActionsPerMinute, ActionBurst int
	// SignInsPerMinute and SignInBurst limit the sign-in attempts of each
	// client address (defaults 10 and 10).
	SignInsPerMinute, SignInBurst int
	// Refresh is how often the overview is sampled and refreshed in the
	// browser (default 5s); Samples how many are kept for the chart
	// (default 120).
	Refresh time.Duration
	Samples int
	// DLQScan is how often, at most, the overview reads the DLQ by reason
	// where the queue's counts are estimates (SQS; default 1m): each read
	// receives every DLQ message. Elsewhere it is read every Refresh.
	DLQScan time.Duration
	// ScanWait is how long the Stuck page and the IN_PROGRESS records
	// page wait for the store (default 20s, under the server's 30s
	// WriteTimeout). On DynamoDB they are a Scan of the whole table,
	// minutes on a large one: past ScanWait the read stops (it would run
	// on after the browser gave up, at every reload) and the page says to
	// run chargerecovery stuck, which waits for the whole read.
	ScanWait time.Duration
	// TrustedProxies are the addresses of proxies in front of the console
	// (a TLS-terminating load balancer, the sign-in proxy): from them, the
	// client's address is the last one they appended to X-Forwarded-For
	// (for the sign-in rate limit and the audit trail). From anywhere
	// else the header counts for nothing.
	TrustedProxies []netip.Prefix
	// MaxClients bounds the rate limiters and the refused sign-in counts
	// kept (one per person and per client address; default 10,000): the
	// least recently seen goes first.
	MaxClients int
	// RefusalSummary is how often refused sign-ins are written to the
	// audit trail, one line per address (default 1m).
	RefusalSummary time.Duration
	// ReconcileReport is the file chargerecovery reconcile --report-file
	// keeps: the Reconciliation page shows it, and an operator resolves
	// its breaks against the statement it names ("": the page says how to
	// configure it).
	ReconcileReport string
	// Fingerprints checks a posting's amount and account against the
	// record's fingerprint when a break is resolved (serve's keys); nil:
	// that check is left out (matched by key only).
	Fingerprints *idempotency.Fingerprinter
	// Lease and SkewMargin are serve's, for a resolve's adoption (it
	// claims the record while it writes DONE) and for what counts as in
	// flight: zero, idempotency's defaults; a negative SkewMargin, none.
	Lease, SkewMargin time.Duration
}

// Console serves the pages.
type Console struct {
	o     Options
	pages map[string]*template.Template
	csrf  []byte
	guard *idempotency.Guard
	// rguard writes a resolve's adoption and resolution: the records'
	// retention with serve's lease and skew margin.
	rguard *idempotency.Guard

	cop *http.CrossOriginProtection

	mu               sync.Mutex
	limiters         *lru.Cache[string, *rate.Limiter] // actions, by person
	signinLimiters   *lru.Cache[string, *rate.Limiter] // sign-in attempts, by client address (an IPv6 /64)
	refused          *lru.Cache[string, refusedCount]  // refused sign-ins by address since refusedSince
	refusedElsewhere int                               // refused sign-ins of addresses evicted from refused
	refusedSince     time.Time
	samples          []sample // oldest first
	sampleAt         time.Time
	report           status.Report
	rerr             error
	dlqScanAt        time.Time          // when the DLQ was last read by reason
	dlqCodes         map[queue.Code]int // what that read counted
	dlqUnseen        int                // and missed

	props  proposals
	runCtx context.Context // Run's: proposal runs end with it

	// witness follows the trail, every Refresh, from the console's own
	// account: each line any process appends is logged as an "audit
	// head" here, and a trail cut below a line seen is an error (nil
	// without a trail).
	witness  *audit.Witness
	trailCut string // the witness's last ErrCut, "" if none
}

// New returns a console; Run samples the overview in the background.
func New(o Options) (*Console, error) {
	if o.Queue == nil || o.Store == nil || o.Auth == nil || o.Audit == nil {
		return nil, errors.New("console: Queue, Store, Auth and Audit are required")
	}
	o.Retention = cmp.Or(o.Retention, idempotency.DefaultRetention)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.ActionsPerMinute = cmp.Or(o.ActionsPerMinute, 10)
	o.ActionBurst = cmp.Or(o.ActionBurst, 5)
	o.SignInsPerMinute = cmp.Or(o.SignInsPerMinute, 10)
	o.SignInBurst = cmp.Or(o.SignInBurst, 10)
	o.Refresh = cmp.Or(o.Refresh, 5*time.Second)
	o.Samples = cmp.Or(o.Samples, 120)
	o.DLQScan = cmp.Or(o.DLQScan, time.Minute)
	o.ScanWait = cmp.Or(o.ScanWait, 20*time.Second)
	o.MaxClients = cmp.Or(o.MaxClients, 10_000)
	o.RefusalSummary = cmp.Or(o.RefusalSummary, time.Minute)
	guard, err := idempotency.NewGuard(o.Store, idempotency.Options{Retention: o.Retention, Clock: clockFunc(o.Now)})
	if err != nil {
		return nil, err
	}
	if o.SkewMargin == 0 {
		o.SkewMargin = idempotency.DefaultSkewMargin
	}
	rguard, err := idempotency.NewGuard(o.Store, idempotency.Options{Lease: o.Lease, Retention: o.Retention, SkewMargin: o.SkewMargin, Clock: clockFunc(o.Now)})
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, guard: guard, rguard: rguard, pages: map[string]*template.Template{}, cop: http.NewCrossOriginProtection(), refusedSince: o.Now().UTC(),
		witness: audit.NewWitness(o.Audit.Path())}
	if c.limiters, err = lru.New[string, *rate.Limiter](o.MaxClients); err != nil {
		return nil, err
	}
	if c.signinLimiters, err = lru.New[string, *rate.Limiter](o.MaxClients); err != nil {
		return nil, err
	}
	if c.refused, err = lru.NewWithEvict(o.MaxClients, func(_ string, n refusedCount) { c.refusedElsewhere += n.count }); err != nil {
		return nil, err
	}
	c.csrf = make([]byte, 32)
	if _, err := rand.Read(c.csrf); err != nil {
		return nil, err
	}
	base, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		page := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if page == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, err
		}
		c.pages[page] = t
	}
	return c, nil
}

// Run samples the overview every Refresh, and writes the refused
// sign-ins' summary every RefusalSummary, until ctx ends (then the last
// summary).
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.o.Refresh)
	defer t.Stop()
	summary := time.NewTicker(c.o.RefusalSummary)
	defer summary.Stop()
	defer c.flushRefusals()
	c.props.mu.Lock()
	c.runCtx = ctx
	c.props.mu.Unlock()
	defer c.props.wg.Wait()
	c.sample(ctx)
	c.witnessTrail()
	for {
		select {
		case <-ctx.Done():
			return
		case <-summary.C:
			c.flushRefusals()
		case <-t.C:
			c.sample(ctx)
			c.witnessTrail()
		}
	}
}

// witnessTrail reads the lines appended to the trail since the last look
// (by the console, the command line, anyone), logging each one's head in
// the console's log — the anchor the operators cannot write — and says
// loudly when the trail no longer holds a line it saw.
func (c *Console) witnessTrail() {
	if c.witness == nil {
		return
	}
	err := c.witness.Check(func(seq int64, hash string) {
		c.o.Logger.Info("audit head", "seq", seq, "sha256", hash, "witnessed", true)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, audit.ErrCut):
		if c.trailCut != err.Error() {
			c.o.Logger.Error("audit trail cut or rewritten below a line the console saw: a line was removed (a decision withdrawn, an action hidden); compare with the audit heads in this log (audit verify --head)", "error", err)
		}
		c.trailCut = err.Error()
	case err != nil:
		c.o.Logger.Warn("the audit trail cannot be read by the console's witness", "error", err)
	default:
		c.trailCut = ""
	}
}

// Handler serves the console.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		// A file of the console's, or its 404 page (never a listing).
		if st, err := fs.Stat(static, strings.TrimPrefix(r.URL.Path, "/static/")); err != nil || st.IsDir() {
			c.notFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /signin", c.signinPage)
	mux.HandleFunc("POST /signin", c.signin)
	mux.Handle("POST /signout", c.authed(c.signout))
	mux.Handle("GET /{$}", c.authed(c.overview))
	mux.Handle("GET /overview/fragment", c.authed(c.overviewFragment))
	mux.Handle("GET /overview.json", c.authed(c.overviewJSON))
	mux.Handle("GET /dlq", c.authed(c.dlqList))
	mux.Handle("GET /dlq/entry", c.authed(c.dlqEntry))
	mux.Handle("GET /dlq/redrive", c.authed(c.confirm("redrive")))
	mux.Handle("POST /dlq/redrive", c.action(c.redrive))
	mux.Handle("GET /charge", c.authed(c.chargePage))
	mux.Handle("GET /charge/reopen", c.authed(c.confirm("reopen")))
	mux.Handle("POST /charge/reopen", c.action(c.reopen))
	mux.Handle("GET /charge/renotify", c.authed(c.confirm("renotify")))
	mux.Handle("POST /charge/renotify", c.action(c.renotify))
	mux.Handle("GET /stuck", c.authed(c.stuckPage))
	mux.Handle("GET /audit", c.authed(c.auditPage))
	c.proposalRoutes(mux)
	mux.Handle("GET /records", c.authed(c.recordsPage))
	mux.Handle("GET /reconciliation", c.authed(c.reconciliationPage))
	mux.Handle("POST /reconciliation/resolve", c.action(c.resolveBreak))
	mux.HandleFunc("/", c.notFound)
	return securityHeaders(mux)
}

// securityHeaders: a strict CSP (no inline script or style, nothing from
// elsewhere, no framing), no sniffing, no referrer to other sites,
// nothing cached.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

type ctxKey struct{}

func identity(r *http.Request) Identity { id, _ := r.Context().Value(ctxKey{}).(Identity); return id }

// authed admits signed-in people only.
func (c *Console) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := duplicatedIdentityHeader(c.o.Auth, r); h != "" {
			http.Error(w, "refused: the request names "+h+" more than once", http.StatusBadRequest)
			return
		}
		id, ok, problem := c.o.Auth.Identify(r)
		if !ok {
			if c.o.Auth.SignIn() && r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "fragment") && !strings.HasSuffix(r.URL.Path, ".json") {
				http.Redirect(w, r, "/signin", http.StatusSeeOther)
				return
			}
			http.Error(w, "not signed in: "+problem, http.StatusUnauthorized)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, id)))
	})
}

// csrfToken is the session's CSRF token.
func (c *Console) csrfToken(id Identity) string {
	m := hmac.New(sha256.New, c.csrf)
	m.Write([]byte("csrf\x00" + id.Session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin refuses a request another site's page sent: net/http's
// CrossOriginProtection (Sec-Fetch-Site, which no page can set, or an
// older browser's Origin against the Host).
func (c *Console) sameOrigin(r *http.Request) bool { return c.cop.Check(r) == nil }

// actionName is the audit trail's name of the action at path.
func actionName(path string) string {
	if path == "/reconciliation/resolve" {
		return "reconcile-resolve" // the command line's name
	}
	return strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(path, "/dlq/"), "/charge/"), "/")
}

// action admits a signed-in operator's POST carrying the session's CSRF
// token, within the person's rate limit; everything refused is audited.
// The action is taken only once a line saying it was requested is written
// and synced to the audit trail (if it cannot be, nothing is done and the
// page says so), and its answer is sent only after its result's line.
func (c *Console) action(h func(http.ResponseWriter, *http.Request, Identity) AuditEntry) http.Handler {
	return c.authed(func(w http.ResponseWriter, r *http.Request) {
		id := identity(r)
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		target := func(e AuditEntry) AuditEntry {
			// The form's id, as every action reads it (PostFormValue):
			// never one in the query string, which no action takes.
			id := r.PostFormValue("id")
			switch {
			case strings.HasPrefix(r.URL.Path, "/dlq/"):
				e.DLQID = charge.Clip(charge.Printable(id), 256)
			case strings.HasPrefix(r.URL.Path, "/proposals/"):
				e.Proposal = charge.Clip(charge.Printable(id), 64)
			default:
				e.ChargeID = charge.Clip(charge.Printable(id), 256)
			}
			return e
		}
		refuse := func(code int, why string) {
			_ = c.audit(r, target(AuditEntry{Operator: id.Name, Role: id.Role.String(), Action: "refused", Result: "refused",
				Detail: fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, why)}))
			c.render(w, r, code, "message", map[string]any{"Title": "Refused", "Message": why})
		}
		if err := r.ParseForm(); err != nil {
			refuse(http.StatusBadRequest, "the form could not be read")
			return
		}
		if !c.sameOrigin(r) {
			refuse(http.StatusForbidden, "the request came from another site")
			return
		}
		if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(c.csrfToken(id))) {
			refuse(http.StatusForbidden, "the form's CSRF token is missing or not this session's: reload the page and try again")
			return
		}
		if id.Role != Operator {
			refuse(http.StatusForbidden, fmt.Sprintf("%s is a viewer: only operators act", id.Name))
			return
		}
		if !c.limiter(id.Name).Allow() {
			refuse(http.StatusTooManyRequests, fmt.Sprintf("more than %d actions a minute: wait a little", c.o.ActionsPerMinute))
			return
		}
		requested := target(AuditEntry{Operator: id.Name, Role: id.Role.String(), Action: actionName(r.URL.Path), Result: "requested",
			Reason: charge.Clip(charge.MaskText(charge.Printable(strings.TrimSpace(r.PostFormValue("reason")))), 500)})
		if err := c.audit(r, requested); err != nil {
			c.render(w, r, http.StatusServiceUnavailable, "message", map[string]any{"Title": "Not done: the audit trail cannot be written",
				"Message": "Nothing was done: every action is written to the audit trail first, and the audit file cannot be written now (a full disk, or its permissions). The console's log says why; try again once it is fixed."})
			return
		}
		bw := &bufferedWriter{header: http.Header{}}
		e := h(bw, r, id)
		e.Operator, e.Role = id.Name, id.Role.String()
		if err := c.audit(r, e); err != nil {
			// The action was taken (its request line is in the trail): say
			// so in the log; the answer goes out as it is.
			c.o.Logger.Error("console: the result of an action taken is not in the audit trail; its request line is", "action", e.Action,
				"charge_id", charge.ShowID(e.ChargeID), "dlq_id", e.DLQID, "result", e.Result)
		}
		bw.flushTo(w)
	})
}

// bufferedWriter holds a page until its audit line is written.
type bufferedWriter struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }
func (b *bufferedWriter) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedWriter) flushTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	w.WriteHeader(cmp.Or(b.code, http.StatusOK))
	_, _ = b.body.WriteTo(w)
}

// limiter is the action rate limiter of a person (kept apart from the
// sign-in limiters: a flood of anonymous sign-ins cannot evict it).
func (c *Console) limiter(name string) *rate.Limiter {
	return c.limiterOf(c.limiters, name, c.o.ActionsPerMinute, c.o.ActionBurst)
}

// signinLimiter is the sign-in rate limiter of a client address; an IPv6
// address counts as its /64 (one host often holds a whole /64).
func (c *Console) signinLimiter(addr string) *rate.Limiter {
	key := addr
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() && !a.Is4In6() {
		key = netip.PrefixFrom(a, 64).Masked().String()
	}
	return c.limiterOf(c.signinLimiters, key, c.o.SignInsPerMinute, c.o.SignInBurst)
}

func (c *Console) limiterOf(cache *lru.Cache[string, *rate.Limiter], key string, perMinute, burst int) *rate.Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := cache.Get(key)
	if !ok {
		l = rate.NewLimiter(rate.Limit(float64(perMinute)/60), burst)
		cache.Add(key, l)
	}
	return l
}

// clientAddr is the address a request comes from: the connection's peer,
// or — when the peer is one of the trusted proxies — the address the proxy
// appended last to X-Forwarded-For (anything a client put before it is its
// own say-so).
func (c *Console) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !slices.ContainsFunc(c.o.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(peer.Unmap()) }) {
		return host
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		return host
	}
	parts := strings.Split(xff[len(xff)-1], ",")
	if a, err := netip.ParseAddr(strings.TrimSpace(parts[len(parts)-1])); err == nil {
		return a.Unmap().String()
	}
	return host
}

// audit appends e to the audit trail and the log; an error means the line
// is not in the trail.
func (c *Console) audit(r *http.Request, e AuditEntry) error {
	e.At = c.o.Now().UTC()
	e.Remote = c.clientAddr(r)
	e.Via = "console"
	e, err := c.o.Audit.Append(e)
	if err != nil {
		c.o.Logger.Error("console: audit entry not written", "error", err, "action", e.Action, "charge_id", charge.ShowID(e.ChargeID))
	}
	c.o.Logger.LogAttrs(r.Context(), slog.LevelWarn, "console action", slog.Bool("audit", err == nil), slog.String("operator", e.Operator),
		slog.String("action", e.Action), slog.String("charge_id", charge.ShowID(e.ChargeID)), slog.String("dlq_id", e.DLQID),
		slog.String("result", e.Result), slog.String("reason", e.Reason), slog.String("detail", e.Detail),
		slog.Int64("audit_seq", e.Seq), slog.String("audit_sha256", e.Hash))
	return err
}

// refusedSignIn counts a refused sign-in from addr; the counts go to the
// audit trail as one line per address a minute (flushRefusals), never one
// synced line per attempt.
func (c *Console) refusedSignIn(addr, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _ := c.refused.Get(addr)
	n.count++
	n.why = why
	c.refused.Add(addr, n)
}

type refusedCount struct {
	count int
	why   string
}

// flushRefusals writes the refused sign-ins counted since the last flush.
func (c *Console) flushRefusals() {
	c.mu.Lock()
	var lines []AuditEntry
	now := c.o.Now().UTC()
	for _, addr := range c.refused.Keys() {
		n, _ := c.refused.Peek(addr)
		lines = append(lines, AuditEntry{At: now, Action: "signin", Result: "refused", Remote: addr,
			Detail: fmt.Sprintf("%d refused sign-in(s) since %s, the last: %s", n.count, c.refusedSince.Format(time.RFC3339), n.why)})
	}
	if c.refusedElsewhere > 0 {
		lines = append(lines, AuditEntry{At: now, Action: "signin", Result: "refused",
			Detail: fmt.Sprintf("%d refused sign-in(s) since %s from addresses past the ones counted one by one", c.refusedElsewhere, c.refusedSince.Format(time.RFC3339))})
	}
	c.refused.Purge()
	c.refusedElsewhere, c.refusedSince = 0, now
	c.mu.Unlock()
	for _, e := range lines {
		e.Via = "console"
		if _, err := c.o.Audit.Append(e); err != nil {
			c.o.Logger.Error("console: audit entry not written", "error", err, "action", e.Action)
		}
		c.o.Logger.Warn("console sign-ins refused", "remote", e.Remote, "detail", e.Detail)
	}
}

// signinPage shows the token form (token sign-in only).
func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	if !c.o.Auth.SignIn() {
		http.Error(w, "sign in through the bank's sign-in proxy", http.StatusNotFound)
		return
	}
	c.render(w, r, http.StatusOK, "signin", map[string]any{})
}

// signin checks a token and starts a session. Refusals are counted per
// client address (summarised in the audit trail once a minute) and
// rate-limited per client address.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	ta, ok := c.o.Auth.(*TokenAuth)
	if !ok {
		http.Error(w, "sign in through the bank's sign-in proxy", http.StatusNotFound)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	addr := c.clientAddr(r)
	if !c.sameOrigin(r) {
		c.refusedSignIn(addr, "a form from another site")
		c.render(w, r, http.StatusForbidden, "signin", map[string]any{"Problem": "refused: a form from another site"})
		return
	}
	if !c.signinLimiter(addr).Allow() {
		c.refusedSignIn(addr, "too many attempts")
		c.render(w, r, http.StatusTooManyRequests, "signin", map[string]any{"Problem": "refused: too many attempts; wait a minute"})
		return
	}
	u, ok, err := ta.check(r.PostFormValue("token"))
	if err != nil {
		c.o.Logger.Error("console: the token file cannot be read: nobody can sign in", "error", err)
		c.render(w, r, http.StatusServiceUnavailable, "signin", map[string]any{"Problem": "sign-in is not possible now: the console's token file cannot be read (its log says why)"})
		return
	}
	if !ok {
		c.refusedSignIn(addr, "unknown token")
		c.render(w, r, http.StatusUnauthorized, "signin", map[string]any{"Problem": "that token is not valid"})
		return
	}
	cookie, err := ta.session(u)
	if err != nil {
		http.Error(w, "no session could be made", http.StatusInternalServerError)
		return
	}
	if err := c.audit(r, AuditEntry{Operator: u.name, Role: u.role.String(), Action: "signin", Result: "signed in"}); err != nil {
		ta.endSession(&http.Request{Header: http.Header{"Cookie": {cookie.String()}}})
		c.render(w, r, http.StatusServiceUnavailable, "signin", map[string]any{"Problem": "sign-in is not possible now: the audit trail cannot be written (the console's log says why)"})
		return
	}
	http.SetCookie(w, cookie)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// signout ends a token session: the session is gone on the server, so a
// copy of the cookie acts for nobody (the CSRF token is required: another
// site cannot sign anyone out).
func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	id := identity(r)
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(c.csrfToken(id))) {
		http.Error(w, "missing CSRF token", http.StatusForbidden)
		return
	}
	if ta, ok := c.o.Auth.(*TokenAuth); ok {
		ta.endSession(r)
		_ = c.audit(r, AuditEntry{Operator: id.Name, Role: id.Role.String(), Action: "signout", Result: "signed out"})
		http.SetCookie(w, &http.Cookie{Name: ta.cookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: ta.o.Secure, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "message", map[string]any{"Title": "Signed in by the proxy", "Message": "Sign out at the bank's sign-in page."})
}
