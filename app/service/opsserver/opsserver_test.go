package opsserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/metrics"
)

func quietOps(t *testing.T, lim Limits) *Server {
	t.Helper()
	ops, err := StartWith("127.0.0.1:0", metrics.New(), func(context.Context) error { return nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)), lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ops.Close() })
	return ops
}

// closedByServer reports whether the server closed c within wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// A client that opens connections and stalls — idle after an answer, in
// the middle of its headers, or in the middle of a body — does not keep
// them: the server closes each one within its timeouts.
func TestTheOpsServerClosesStalledConnections(t *testing.T) {
	t.Parallel()
	ops := quietOps(t, Limits{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxConns: 100})
	stalls := map[string]func(c net.Conn, r *bufio.Reader) error{
		"idle after an answer": func(c net.Conn, r *bufio.Reader) error {
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ops\r\n\r\n"); err != nil {
				return err
			}
			resp, err := http.ReadResponse(r, nil)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return err
		},
		"half a header": func(c net.Conn, _ *bufio.Reader) error {
			_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ops\r\nX-Slow: ")
			return err
		},
		"half a body": func(c net.Conn, _ *bufio.Reader) error {
			_, err := io.WriteString(c, "POST /readyz HTTP/1.1\r\nHost: ops\r\nContent-Length: 1000\r\n\r\nabc")
			return err
		},
	}
	for name, stall := range stalls {
		var conns []net.Conn
		for range 20 {
			c, err := net.Dial("tcp", ops.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := stall(c, bufio.NewReader(c)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			conns = append(conns, c)
		}
		open := 0
		for _, c := range conns {
			if !closedByServer(c, 3*time.Second) {
				open++
			}
		}
		if open > 0 {
			t.Errorf("%s: %d of %d connections still open after 10× the timeouts", name, open, len(conns))
		}
	}
}

// At most MaxConns connections are served at once: more wait to be
// accepted, and are served once the stalled ones time out.
func TestTheOpsServerServesAtMostMaxConnsAtOnce(t *testing.T) {
	t.Parallel()
	ops := quietOps(t, Limits{ReadTimeout: 500 * time.Millisecond, MaxConns: 4})
	for range 12 {
		c, err := net.Dial("tcp", ops.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	if p := ops.peak.Load(); p > 4 {
		t.Errorf("%d connections served at once, want at most 4", p)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + ops.Addr() + "/healthz")
	if err != nil {
		t.Fatalf("/healthz after the stalled connections timed out: %v", err)
	}
	resp.Body.Close()
	if p := ops.peak.Load(); p > 4 {
		t.Errorf("%d connections served at once, want at most 4", p)
	}
}
