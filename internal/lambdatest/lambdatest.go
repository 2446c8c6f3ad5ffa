// Package lambdatest is a local AWS Lambda Runtime API server for tests: a
// function process started with AWS_LAMBDA_RUNTIME_API set to Addr asks
// it for the next invocation (GET /2018-06-01/runtime/invocation/next,
// answered with the event and the Lambda-Runtime-Aws-Request-Id,
// Lambda-Runtime-Deadline-Ms and Lambda-Runtime-Invoked-Function-Arn
// headers) and posts the result (…/invocation/{id}/response or /error),
// as it does in Lambda. Several processes may share one server, as
// several execution environments share a function: each invocation goes
// to the first that asks.
package lambdatest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FunctionARN is the ARN every invocation carries.
const FunctionARN = "arn:aws:lambda:us-east-1:123456789012:function:test-function"

// Result is what the function posted for an invocation.
type Result struct {
	RequestID string
	// Body is the response (OK) or the error document (!OK).
	Body []byte
	OK   bool
}

type invocation struct {
	id       string
	payload  []byte
	deadline time.Time
	done     chan Result
}

// Runtime is the server.
type Runtime struct {
	// Addr is host:port, the value of AWS_LAMBDA_RUNTIME_API.
	Addr string

	srv     *httptest.Server
	pending chan *invocation
	mu      sync.Mutex
	seq     int
	running map[string]*invocation
	// InitErrors are the bodies posted to /runtime/init/error.
	initErrors []string
}

// Start starts a server that stops with the test.
func Start(t testing.TB) *Runtime {
	t.Helper()
	r := &Runtime{pending: make(chan *invocation), running: map[string]*invocation{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", r.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, req *http.Request) { r.post(w, req, true) })
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", func(w http.ResponseWriter, req *http.Request) { r.post(w, req, false) })
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.initErrors = append(r.initErrors, string(b))
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	r.srv = httptest.NewServer(mux)
	r.Addr = strings.TrimPrefix(r.srv.URL, "http://")
	t.Cleanup(r.srv.Close)
	return r
}

// InitErrors returns what the functions posted to /runtime/init/error.
func (r *Runtime) InitErrors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.initErrors...)
}

func (r *Runtime) next(w http.ResponseWriter, req *http.Request) {
	select {
	case <-req.Context().Done():
		return
	case inv := <-r.pending:
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", FunctionARN)
		h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(inv.payload)
	}
}

func (r *Runtime) post(w http.ResponseWriter, req *http.Request, ok bool) {
	id := req.PathValue("id")
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	inv := r.running[id]
	delete(r.running, id)
	r.mu.Unlock()
	if inv == nil {
		http.Error(w, "unknown or already answered request id "+id, http.StatusBadRequest)
		return
	}
	inv.done <- Result{RequestID: id, Body: body, OK: ok}
	w.WriteHeader(http.StatusAccepted)
}

// Invoke hands payload to the next function process that asks, with the
// given deadline, and waits for its result (until ctx ends).
func (r *Runtime) Invoke(ctx context.Context, payload []byte, deadline time.Time) (Result, error) {
	r.mu.Lock()
	r.seq++
	inv := &invocation{id: fmt.Sprintf("req-%04d", r.seq), payload: payload, deadline: deadline, done: make(chan Result, 1)}
	r.running[inv.id] = inv
	r.mu.Unlock()
	select {
	case r.pending <- inv:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("lambdatest: no function asked for invocation %s: %w", inv.id, ctx.Err())
	}
	select {
	case res := <-inv.done:
		return res, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("lambdatest: no result for invocation %s: %w", inv.id, ctx.Err())
	}
}
