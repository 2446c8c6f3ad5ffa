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
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/internal/operate"
	"github.com/finedge/idempotent-consumer/internal/status"
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
	Logger     *slog.Logger // default: discard
	Now        func() time.Time
	// ActionsPerMinute and ActionBurst limit each person's actions
	// (defaults 10 and 5).
	ActionsPerMinute, ActionBurst int
	// Refresh is how often the overview is sampled and refreshed in the
	// browser (default 5s); Samples how many are kept for the chart
	// (default 120).
	Refresh time.Duration
	Samples int
}

// Console serves the pages.
type Console struct {
	o     Options
	pages map[string]*template.Template
	csrf  []byte
	guard *idempotency.Guard

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
	samples  []sample // oldest first
	sampleAt time.Time
	report   status.Report
	rerr     error
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
	o.Refresh = cmp.Or(o.Refresh, 5*time.Second)
	o.Samples = cmp.Or(o.Samples, 120)
	guard, err := idempotency.NewGuard(o.Store, idempotency.Options{Retention: o.Retention, Clock: clockFunc(o.Now)})
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, guard: guard, limiters: map[string]*rate.Limiter{}, pages: map[string]*template.Template{}}
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

// Run samples the overview every Refresh until ctx ends.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.o.Refresh)
	defer t.Stop()
	for {
		c.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Handler serves the console.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
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

// sameOrigin refuses a request another site's page sent. A browser says
// where a request comes from in Sec-Fetch-Site, which no page can set; an
// older one only in Origin.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin" || s == "none"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

// action admits a signed-in operator's POST carrying the session's CSRF
// token, within the person's rate limit; everything refused is audited.
func (c *Console) action(h func(http.ResponseWriter, *http.Request, Identity) AuditEntry) http.Handler {
	return c.authed(func(w http.ResponseWriter, r *http.Request) {
		id := identity(r)
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		refuse := func(code int, why string) {
			e := AuditEntry{Operator: id.Name, Role: id.Role.String(), Action: "refused", Result: "refused",
				Detail: fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, why)}
			if strings.HasPrefix(r.URL.Path, "/dlq/") {
				e.DLQID = r.FormValue("id")
			} else {
				e.ChargeID = r.FormValue("id")
			}
			c.audit(r, e)
			c.render(w, r, code, "message", map[string]any{"Title": "Refused", "Message": why})
		}
		if err := r.ParseForm(); err != nil {
			refuse(http.StatusBadRequest, "the form could not be read")
			return
		}
		if !sameOrigin(r) {
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
		e := h(w, r, id)
		e.Operator, e.Role = id.Name, id.Role.String()
		c.audit(r, e)
	})
}

func (c *Console) limiter(name string) *rate.Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.limiters[name]
	if !ok {
		l = rate.NewLimiter(rate.Limit(float64(c.o.ActionsPerMinute)/60), c.o.ActionBurst)
		c.limiters[name] = l
	}
	return l
}

// audit appends e to the audit trail and the log.
func (c *Console) audit(r *http.Request, e AuditEntry) {
	e.At = c.o.Now().UTC()
	e.Remote = r.RemoteAddr
	if err := c.o.Audit.Append(e); err != nil {
		c.o.Logger.Error("console: audit entry not written", "error", err, "action", e.Action, "charge_id", e.ChargeID)
	}
	c.o.Logger.LogAttrs(r.Context(), slog.LevelWarn, "console action", slog.Bool("audit", true), slog.String("operator", e.Operator),
		slog.String("action", e.Action), slog.String("charge_id", e.ChargeID), slog.String("dlq_id", e.DLQID),
		slog.String("result", e.Result), slog.String("reason", e.Reason), slog.String("detail", e.Detail))
}

// signinPage shows the token form (token sign-in only).
func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	if !c.o.Auth.SignIn() {
		http.Error(w, "sign in through the bank's sign-in proxy", http.StatusNotFound)
		return
	}
	c.render(w, r, http.StatusOK, "signin", map[string]any{})
}

// signin checks a token and starts a session. Failures are audited and
// rate-limited per client address.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	ta, ok := c.o.Auth.(*TokenAuth)
	if !ok {
		http.Error(w, "sign in through the bank's sign-in proxy", http.StatusNotFound)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if !sameOrigin(r) || !c.limiter("signin@"+host).Allow() {
		c.audit(r, AuditEntry{Action: "signin", Result: "refused", Detail: "another site's form, or too many attempts"})
		c.render(w, r, http.StatusTooManyRequests, "signin", map[string]any{"Problem": "refused: too many attempts, or a form from another site"})
		return
	}
	u, ok := ta.check(r.PostFormValue("token"))
	if !ok {
		c.audit(r, AuditEntry{Action: "signin", Result: "refused", Detail: "unknown token"})
		c.render(w, r, http.StatusUnauthorized, "signin", map[string]any{"Problem": "that token is not valid"})
		return
	}
	cookie, err := ta.session(u)
	if err != nil {
		http.Error(w, "no session could be made", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, cookie)
	c.audit(r, AuditEntry{Operator: u.name, Role: u.role.String(), Action: "signin", Result: "signed in"})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// signout ends a token session (the CSRF token is required: another site
// cannot sign anyone out).
func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	id := identity(r)
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(c.csrfToken(id))) {
		http.Error(w, "missing CSRF token", http.StatusForbidden)
		return
	}
	if ta, ok := c.o.Auth.(*TokenAuth); ok {
		http.SetCookie(w, &http.Cookie{Name: ta.cookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: ta.secure, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "message", map[string]any{"Title": "Signed in by the proxy", "Message": "Sign out at the bank's sign-in page."})
}
