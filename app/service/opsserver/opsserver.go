// Package opsserver is serve's ops endpoint: /metrics, /healthz (the
// process is alive) and /readyz (the queue and the store answer), bounded
// so that no client can hold it from the probes.
package opsserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/finedge/idempotent-consumer/app/metrics"
	"github.com/finedge/idempotent-consumer/app/service/cli"
	"github.com/finedge/idempotent-consumer/app/service/pipeline"
)

// Server serves /metrics, /healthz (the process is alive) and /readyz
// (the queue and the store answer).
type Server struct {
	srv  *http.Server
	ln   net.Listener
	errc chan error
	// open and peak count the connections being served.
	open, peak atomic.Int64
}

// Limits bound what one client can hold of the ops server: it is
// reachable by whatever can reach the pod, and must keep answering the
// probes.
type Limits struct {
	// ReadTimeout bounds reading one request, headers and body (default
	// 10s); WriteTimeout writing its answer (default 30s: a scrape);
	// IdleTimeout a kept-alive connection between requests (default 60s).
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConns is how many connections are served at once (default 64);
	// more wait to be accepted.
	MaxConns int
}

func (l Limits) withDefaults() Limits {
	l.ReadTimeout = cmp.Or(l.ReadTimeout, 10*time.Second)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, 30*time.Second)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, 60*time.Second)
	l.MaxConns = cmp.Or(l.MaxConns, 64)
	return l
}

// Start serves m's /metrics and ready's /readyz on addr (--http-addr: a
// usage error if it cannot listen there) with the default Limits; the
// detail of a failed readiness check goes to log, never to the client.
func Start(addr string, m *metrics.Metrics, ready func(context.Context) error, log *slog.Logger) (*Server, error) {
	return StartWith(addr, m, ready, log, Limits{})
}

// StartWith is Start within lim.
func StartWith(addr string, m *metrics.Metrics, ready func(context.Context) error, log *slog.Logger, lim Limits) (*Server, error) {
	lim = lim.withDefaults()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		err := ready(ctx)
		var idle *pipeline.Idle
		if errors.As(err, &idle) {
			// Working, and posting nothing now (outside the posting window).
			fmt.Fprintf(w, "ready; %s\n", idle.Public)
			return
		}
		if err != nil {
			// The detail goes to the log; anyone may read /readyz.
			log.Warn("readiness check failed", "error", err)
			public := "not ready (the service's log says why)"
			var nr *pipeline.NotReady
			if errors.As(err, &nr) {
				public = nr.Public
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", public)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Usagef("--http-addr %s: %v", addr, err)
	}
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: min(5*time.Second, lim.ReadTimeout), ReadTimeout: lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout, IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}, errc: make(chan error, 1)}
	// The count sits beneath the limit: a connection is counted once the
	// limit admitted it and uncounted when it is closed, before the limit
	// admits the next (http.Server's StateClosed hook runs after that, so
	// counting there saw one more than were ever held).
	s.ln = netutil.LimitListener(&countingListener{Listener: ln, s: s}, lim.MaxConns)
	go func() { s.errc <- s.srv.Serve(s.ln) }()
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// MetricsURL is the /metrics a client on this host reaches (a wildcard
// host is reached on loopback): the console mounted in serve reads the
// circuit there.
func (s *Server) MetricsURL() string {
	addr := s.Addr()
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, port)
	}
	return "http://" + addr + "/metrics"
}

// Close shuts the server down (5s at most for the requests in flight).
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// countingListener counts the connections accepted and not yet closed.
type countingListener struct {
	net.Listener
	s *Server
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.s.open.Add(1)
	for p := l.s.peak.Load(); n > p && !l.s.peak.CompareAndSwap(p, n); p = l.s.peak.Load() {
	}
	return &countedConn{Conn: c, s: l.s}, nil
}

type countedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.open.Add(-1) })
	return err
}
