package console

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"golang.org/x/net/netutil"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/service/approval"
	"github.com/finedge/idempotent-consumer/app/service/backend"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/operate"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
)

// Config are the console's flags, shared by chargerecovery console and
// serve --console: where it listens, how people sign in, the audit trail.
type Config struct {
	Addr, Auth, TokenFile, AuditFile, KeyFile  string
	OldAuditFile, Approval                     string
	ApprovalTTL                                time.Duration
	ApprovalBatch                              int
	UserHeader, GroupsHeader, OperatorGroup    string
	Operators, TrustedProxies, TLSCert, TLSKey string
	SessionTTL, Refresh                        time.Duration
	ActionsPerMinute                           int
	ReconcileReportFile                        string
}

// Bind registers the --console-* flags on f.
func (c *Config) Bind(f *cli.FlagSet) {
	f.String(&c.Addr, "console-addr", "IC_CONSOLE_ADDR", "127.0.0.1:8088", "the console listens here (loopback unless told otherwise)")
	f.String(&c.Auth, "console-auth", "IC_CONSOLE_AUTH", "", "how people sign in (required; no anonymous access): proxy (a trusted authenticating proxy's header, e.g. oauth2-proxy in front of the bank's identity provider) or token (--console-token-file)")
	f.String(&c.TokenFile, "console-token-file", "IC_CONSOLE_TOKEN_FILE", "", "token sign-in: an owner-only (0600) file of lines NAME ROLE sha256:HASH [ed25519:KEY] (role viewer or operator; the token's hash, never the token: chargerecovery token NAME ROLE makes both; KEY: the public key she signs her command-line actions with), looked at on every request: a removed line ends its sessions at once")
	f.String(&c.KeyFile, "console-key-file", "IC_CONSOLE_KEY_FILE", "", "the console's own Ed25519 key (an owner-only file of the console's account; chargerecovery keygen writes one): it signs the console's audit lines and the four-eyes settings kept in the backend; required for four-eyes (--approval-required) and wherever settings are kept")
	f.String(&c.UserHeader, "console-user-header", "IC_CONSOLE_USER_HEADER", "X-Auth-Request-User", "proxy sign-in: the header naming the signed-in user")
	f.String(&c.GroupsHeader, "console-groups-header", "IC_CONSOLE_GROUPS_HEADER", "", "proxy sign-in: the header listing the user's groups (comma-separated), e.g. X-Auth-Request-Groups")
	f.String(&c.OperatorGroup, "console-operator-group", "IC_CONSOLE_OPERATOR_GROUP", "", "proxy sign-in: members of this group are operators (everyone else signed in is a viewer)")
	f.String(&c.Operators, "console-operators", "IC_CONSOLE_OPERATORS", "", "proxy sign-in: users who are operators, comma-separated")
	f.String(&c.TrustedProxies, "console-trusted-proxies", "IC_CONSOLE_TRUSTED_PROXIES", "", "the addresses or CIDR ranges of proxies in front of the console: required for proxy sign-in (the user header from anywhere else counts for nothing); with token sign-in behind a TLS-terminating proxy, the client's address is then the one the proxy appended to X-Forwarded-For (sign-in rate limit, audit trail)")
	f.String(&c.AuditFile, "audit-file", "IC_AUDIT_FILE", "", "the audit trail, shared with the command line: every action, taken or refused, a hash-chained JSON line, synced before it is done (required)")
	f.String(&c.OldAuditFile, "console-audit-file", "IC_CONSOLE_AUDIT_FILE", "", "the former name of --audit-file")
	f.String(&c.Approval, "approval-required", "IC_APPROVAL_REQUIRED", "", "four-eyes: which actions a second operator must approve, comma-separated: reopen-new-attempt, redrive-force, reconcile-adopt (a reconciliation resolve adopting a posting), bulk>N (more than N charges), all; off by default")
	f.Duration(&c.ApprovalTTL, "approval-ttl", "IC_APPROVAL_TTL", 24*time.Hour, "how long a proposal waits for approval, and an approved one for its run")
	f.Int(&c.ApprovalBatch, "approval-batch", "IC_APPROVAL_BATCH", 50, "a proposal's run acts on this many charges between two saves of its progress (1 to 500)")
	f.String(&c.TLSCert, "console-tls-cert", "IC_CONSOLE_TLS_CERT", "", "serve the console over TLS with this certificate (PEM; with --console-tls-key)")
	f.String(&c.TLSKey, "console-tls-key", "IC_CONSOLE_TLS_KEY", "", "the console certificate's key (PEM)")
	f.Duration(&c.SessionTTL, "console-session-ttl", "IC_CONSOLE_SESSION_TTL", 8*time.Hour, "token sign-in: how long a session lasts")
	f.Duration(&c.Refresh, "console-refresh", "IC_CONSOLE_REFRESH", 5*time.Second, "how often the overview is sampled and refreshed in the browser (on SQS the DLQ is read by reason at most once a minute; its counts every time)")
	f.String(&c.ReconcileReportFile, "reconcile-report-file", "IC_RECONCILE_REPORT_FILE", "", "the report chargerecovery reconcile --report-file keeps (the same variable): the Reconciliation page shows it, and an operator resolves its breaks against the statement it names (\"\": the page says how to configure it)")
	f.Int(&c.ActionsPerMinute, "console-actions-per-minute", "IC_CONSOLE_ACTIONS_PER_MINUTE", 10, "actions (redrive, reopen, renotify) one person may take a minute")
}

func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Check reports what is wrong with the flags.
func (c *Config) Check(p *cli.Problems) {
	tlsOn := c.TLSCert != "" || c.TLSKey != ""
	if tlsOn && (c.TLSCert == "" || c.TLSKey == "") {
		p.Add("--console-tls-cert and --console-tls-key go together")
	}
	switch c.Auth {
	case "":
		p.Add("--console-auth (IC_CONSOLE_AUTH) is required: proxy or token (the console has no anonymous access)")
	case "token":
		if c.TokenFile == "" {
			p.Add("--console-auth token needs --console-token-file")
		} else if _, err := ReadTokenFile(c.TokenFile); err != nil {
			p.Add("--console-token-file: %v", err)
		}
		if !tlsOn && !loopbackAddr(c.Addr) {
			p.Add("token sign-in on %s over plain HTTP would send tokens and sessions in clear: give --console-tls-cert and --console-tls-key, or listen on loopback", c.Addr)
		}
		if _, err := ParsePrefixes(c.TrustedProxies); err != nil {
			p.Add("--console-trusted-proxies: %v", err)
		}
	case "proxy":
		if c.TrustedProxies == "" {
			p.Add("--console-auth proxy needs --console-trusted-proxies: the proxy's addresses (a user header from anyone else must count for nothing)")
		} else if _, err := ParsePrefixes(c.TrustedProxies); err != nil {
			p.Add("--console-trusted-proxies: %v", err)
		}
		if c.Operators == "" && c.OperatorGroup == "" {
			p.Add("--console-auth proxy needs --console-operators or --console-groups-header with --console-operator-group: who may act (everyone else is a viewer)")
		}
		if (c.GroupsHeader == "") != (c.OperatorGroup == "") {
			p.Add("--console-groups-header and --console-operator-group go together")
		}
	default:
		p.Add("--console-auth %q is not proxy or token", c.Auth)
	}
	switch {
	case c.AuditFile == "" && c.OldAuditFile == "":
		p.Add("--audit-file (IC_AUDIT_FILE) is required: every action is written there")
	case c.AuditFile != "" && c.OldAuditFile != "" && c.AuditFile != c.OldAuditFile:
		p.Add("--audit-file and --console-audit-file (its former name) name two files: give one")
	case c.AuditFile == "":
		c.AuditFile = c.OldAuditFile
	}
	if _, err := approval.ParsePolicy(c.Approval); err != nil {
		p.Add("%v", err)
	}
	if c.ApprovalTTL < time.Minute {
		p.Add("--approval-ttl must be at least 1m")
	}
	if c.ApprovalBatch < 1 || c.ApprovalBatch > 500 {
		p.Add("--approval-batch must be between 1 and 500")
	}
	if c.Refresh < time.Second || c.SessionTTL < time.Minute || c.ActionsPerMinute < 1 {
		p.Add("--console-refresh must be at least 1s, --console-session-ttl at least 1m, --console-actions-per-minute at least 1")
	}
}

func (c *Config) authenticator() (Authenticator, error) {
	trusted, err := ParsePrefixes(c.TrustedProxies)
	if err != nil {
		return nil, cli.Usagef("--console-trusted-proxies: %v", err)
	}
	if c.Auth == "token" {
		a, err := NewTokenAuth(TokenOptions{File: c.TokenFile, TTL: c.SessionTTL, Secure: c.TLSCert != "" || !loopbackAddr(c.Addr) || c.TrustedProxies != ""})
		if err != nil {
			return nil, cli.Usagef("--console-token-file: %v", err)
		}
		return a, nil
	}
	return ProxyAuth{UserHeader: c.UserHeader, GroupsHeader: c.GroupsHeader, OperatorGroup: c.OperatorGroup,
		Operators: cli.SplitList(c.Operators), Trusted: trusted}, nil
}

// Server is a running console.
type Server struct {
	srv   *http.Server
	ln    net.Listener
	audit *AuditLog
	stop  context.CancelFunc
	ran   <-chan struct{} // closed when the console's Run (and its proposal runs) ended
	errc  chan error
}

// Deps are what a console reads and acts through.
type Deps struct {
	Backend    *backend.Backend
	Retention  time.Duration   // of the idempotency records
	MetricsURL string          // a consumer's /metrics ("": no circuit state)
	Notifier   charge.Notifier // nil, or one that cannot send a kept notice: renotify not offered
	Channel    string          // the notifier's, named in the history line
	// Lease and SkewMargin are serve's (zero: idempotency's defaults; a
	// negative SkewMargin: none), and Fingerprints its keys (nil: a
	// resolved break's amount is not checked against the fingerprint):
	// the Reconciliation page's resolve uses them.
	Lease, SkewMargin time.Duration
	Fingerprints      *idempotency.Fingerprinter
}

// Start serves the console of d on c.Addr until ctx ends or Close; a
// problem with the flags' files or address is a usage error.
func (c *Config) Start(ctx context.Context, d Deps, log *slog.Logger) (*Server, error) {
	auth, err := c.authenticator()
	if err != nil {
		return nil, err
	}
	trusted, _ := ParsePrefixes(c.TrustedProxies) // checked by authenticator
	audit, err := OpenAuditLog(c.AuditFile)
	if err != nil {
		return nil, cli.Usagef("--audit-file: %v", err)
	}
	// Every line's seq and hash go to the log (kept off the host), which
	// anchors the chain's end: a line cut from the file shows there.
	audit.Head = func(seq int64, hash string) { log.Info("audit head", "seq", seq, "sha256", hash) }
	ks, err := c.keepSettings(ctx, d.Backend.Store, audit, log)
	if err != nil {
		audit.Close()
		return nil, err
	}
	book, err := approval.Open(audit, approval.Options{Policy: &ks.policy, Keys: ks.keys, TTL: c.ApprovalTTL, Batch: c.ApprovalBatch})
	if err != nil {
		audit.Close()
		return nil, err
	}
	policy := book.Policy()
	var rn *operate.Renotifier
	if s, ok := d.Notifier.(charge.NoticeSender); ok {
		if _, ok := d.Backend.Store.(driver.Amender); ok {
			// A notice's claim outlasts its send (5s at most), as renotify's.
			if rn, err = operate.NewRenotifier(d.Backend.Store, s, operate.RenotifierOptions{Lease: time.Minute, Retention: d.Retention, Channel: d.Channel}); err != nil {
				return nil, err
			}
		}
	}
	con, err := New(Options{Backend: d.Backend.Desc, Queue: d.Backend.Queue, Store: d.Backend.Store, MetricsURL: d.MetricsURL,
		Retention: d.Retention, Renotifier: rn, Auth: auth, Audit: audit, Approvals: book, Logger: log, Refresh: c.Refresh, ActionsPerMinute: c.ActionsPerMinute,
		TrustedProxies: trusted, ReconcileReport: c.ReconcileReportFile, Fingerprints: d.Fingerprints, Lease: d.Lease, SkewMargin: d.SkewMargin})
	if err != nil {
		audit.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		audit.Close()
		return nil, cli.Usagef("--console-addr %s: %v", c.Addr, err)
	}
	ln = netutil.LimitListener(ln, 64)
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			ln.Close()
			audit.Close()
			return nil, cli.Usagef("--console-tls-cert/--console-tls-key: %v", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	cctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { con.Run(cctx); close(ran) }()
	s := &Server{ln: ln, audit: audit, stop: stop, ran: ran, errc: make(chan error, 1),
		srv: &http.Server{Handler: con.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}}
	go func() { s.errc <- s.srv.Serve(ln) }()
	scheme := "http"
	if c.TLSCert != "" {
		scheme = "https"
	}
	log.Info("console serving", "url", scheme+"://"+ln.Addr().String(), "auth", c.Auth, "audit_file", c.AuditFile, "approval_required", policy.String())
	return s, nil
}

// Err gets the error the console's server stopped with, if it stops
// before Close.
func (s *Server) Err() <-chan error { return s.errc }

// Close stops the console and closes its audit trail.
func (s *Server) Close() error {
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	<-s.ran // a proposal's batch ends with its line written, before the trail closes
	return errors.Join(err, s.audit.Close())
}
