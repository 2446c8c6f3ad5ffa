package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/finedge/idempotent-consumer/internal/cli"
	"github.com/finedge/idempotent-consumer/metrics"
)

// opsServer serves /metrics, /healthz (the process is alive) and /readyz
// (the queue and the store answer).
type opsServer struct {
	srv  *http.Server
	ln   net.Listener
	errc chan error
}

func startOpsServer(addr string, m *metrics.Metrics, ready func(context.Context) error, log *slog.Logger) (*opsServer, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			log.Warn("readiness check failed", "error", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.Usagef("--http-addr %s: %v", addr, err)
	}
	s := &opsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, errc: make(chan error, 1)}
	go func() { s.errc <- s.srv.Serve(ln) }()
	return s, nil
}

func (s *opsServer) addr() string { return s.ln.Addr().String() }

func (s *opsServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
