package chargehandler_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/chargehandler"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/app/notifysim"
	"github.com/finedge/idempotent-consumer/circuit"
	"github.com/finedge/idempotent-consumer/consumer"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/idempotency/driver"
	"github.com/finedge/idempotent-consumer/memstore"
)

// lease is what the table's guard holds a claim for.
const boundaryLease = 30 * time.Second

// answer is how the fake bank answers one debit.
type answer func(w http.ResponseWriter, r *http.Request)

func status(code int, body string) answer {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
}

const posted = `{"reference":"CBS0000000001","idempotencyKey":"CHG-T","status":"POSTED"}`

// TestWhatTheBankAnsweredDecidesWhatWeDo is the table of docs/operations/bank.md "what the
// bank answered → what we do", one subtest per row: the real HTTP client
// and the service over a store, from the bank's answer to the outcome, the
// ack decision, the record and the lease.
func TestWhatTheBankAnsweredDecidesWhatWeDo(t *testing.T) {
	type want struct {
		outcome charge.Outcome
		action  consumer.Action
		state   driver.State // record afterwards
		lease   string       // "kept" (live, retry after it), "given up" (reclaimable now), "" (final)
		alert   bool
		failure bool // counted against the circuit breaker
	}
	kept := func(alert bool) want {
		return want{charge.RetryLater, consumer.Retry, driver.StateInProgress, "kept", alert, true}
	}
	// pending: the bank works and has the debit, but has not posted it.
	pending := want{charge.RetryLater, consumer.Retry, driver.StateInProgress, "kept", false, false}
	tests := []struct {
		name     string
		answer   answer
		declines []corebank.DeclineRule
		setup    string // "refused": nothing listens; "open": the circuit is open; "resent": see below
		want     want
	}{
		{name: "201 posted", answer: status(201, posted),
			want: want{charge.Processed, consumer.Ack, driver.StateDone, "", false, false}},
		{name: "200 replay of the key", answer: status(200, posted),
			want: want{charge.Processed, consumer.Ack, driver.StateDone, "", false, false}},
		{name: "422 DECLINED with a code", answer: status(422, `{"error":"DECLINED","code":"INSUFFICIENT_FUNDS"}`),
			want: want{charge.DebitFailed, consumer.DeadLetter, driver.StateFailed, "", false, false}},
		{name: "configured decline 402 NSF", answer: status(402, `{"error":"NSF","message":"balance too low"}`),
			declines: []corebank.DeclineRule{{Status: 402, Error: "NSF"}},
			want:     want{charge.DebitFailed, consumer.DeadLetter, driver.StateFailed, "", false, false}},
		{name: "422 that is not a decline", answer: status(422, `{"error":"IDEMPOTENCY_KEY_REUSED"}`), want: kept(true)},
		{name: "400 bad request", answer: status(400, `{"error":"BAD_REQUEST"}`), want: kept(true)},
		{name: "401 expired gateway token", answer: status(401, `{"error":"UNAUTHORIZED"}`), want: kept(true)},
		{name: "403 forbidden", answer: status(403, ``), want: kept(true)},
		{name: "404 wrong URL", answer: status(404, `<html>not here</html>`), want: kept(true)},
		{name: "405 method not allowed", answer: status(405, ``), want: kept(true)},
		{name: "410 gone", answer: status(410, ``), want: kept(true)},
		{name: "302 redirect is not followed", answer: status(302, ``), want: kept(true)},
		{name: "307 redirect is not followed", answer: status(307, ``), want: kept(true)},
		{name: "408 request timeout", answer: status(408, ``), want: kept(false)},
		{name: "409 request in progress", answer: status(409, `{"error":"REQUEST_IN_PROGRESS"}`), want: kept(false)},
		{name: "423 locked", answer: status(423, ``), want: kept(false)},
		{name: "425 too early", answer: status(425, ``), want: kept(false)},
		{name: "429 throttled", answer: status(429, `{"error":"THROTTLED"}`), want: kept(false)},
		{name: "500", answer: status(500, ``), want: kept(false)},
		{name: "502 after posting", answer: status(502, `{"error":"BAD_GATEWAY"}`), want: kept(false)},
		{name: "503 end-of-day window", answer: status(503, `{"error":"UNAVAILABLE"}`), want: kept(false)},
		{name: "504", answer: status(504, ``), want: kept(false)},
		{name: "201 with an unreadable body", answer: status(201, `{"ref`), want: kept(false)},
		{name: "201 without a reference", answer: status(201, `{"status":"POSTED"}`), want: kept(false)},
		{name: "201 without a status", answer: status(201, `{"reference":"CBS0000000001"}`), want: kept(false)},
		{name: "200 with an unknown status", answer: status(200, `{"reference":"CBS0000000001","status":"QUEUED_FOR_EOD"}`), want: kept(false)},
		{name: "201 naming another idempotency key", answer: status(201, `{"reference":"CBS0000000001","idempotencyKey":"CHG-OTHER","status":"POSTED"}`), want: kept(false)},
		{name: "202 PENDING: accepted, not posted", answer: status(202, `{"reference":"CBS0000000001","idempotencyKey":"CHG-T","status":"PENDING"}`), want: pending},
		{name: "200 ACCEPTED: accepted, not posted", answer: status(200, `{"idempotencyKey":"CHG-T","status":"ACCEPTED"}`), want: pending},
		{name: "timeout: no answer in time", answer: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, want: kept(false)},
		{name: "connection reset after the request was written", answer: func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, want: kept(false)},
		{name: "request read, connection dropped, the transport's re-dial refused", setup: "resent", want: kept(false)},
		{name: "connection refused: never sent", setup: "refused",
			want: want{charge.RetryLater, consumer.Retry, driver.StateInProgress, "given up", false, true}},
		{name: "circuit open: never sent", setup: "open",
			want: want{charge.RetryLater, consumer.Retry, driver.StateInProgress, "given up", false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var url string
			switch tt.setup {
			case "resent":
				url = readThenVanish(t)
			case "refused":
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				url = "http://" + ln.Addr().String()
				ln.Close() // nothing listens there now
			default:
				h := tt.answer
				if h == nil {
					h = status(201, posted)
				}
				srv := httptest.NewServer(http.HandlerFunc(h))
				t.Cleanup(srv.Close)
				url = srv.URL
			}
			br, err := circuit.New(circuit.Options{Threshold: 100, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if tt.setup == "open" {
				for range 100 {
					tk, _ := br.Allow() // one failed call
					br.Record(tk, fmt.Errorf("earlier failure"))
				}
			}
			client, err := corebank.NewClient(url, corebank.ClientOptions{Timeout: 200 * time.Millisecond, Declines: tt.declines, Breaker: br})
			if err != nil {
				t.Fatal(err)
			}
			if tt.setup == "resent" {
				// A first call leaves a connection in the pool, so that the
				// debit goes out on a reused one.
				if err := client.Probe(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			before := br.Status().Failures
			guard, err := idempotency.NewGuard(memstore.New(), idempotency.Options{Lease: boundaryLease})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := charge.NewService(charge.Options{Guard: guard, Debiter: client, Notifier: notifysim.NewRecorder(0, quiet), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			c := charge.Charge{ID: "CHG-T", AccountID: "001234567890", Amount: charge.Money{Minor: 2500, Currency: "INR"},
				Type: charge.SMSAlertFee, DueDate: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}
			res := svc.Process(context.Background(), c, nil)
			dec := chargehandler.Decide(res, time.Second)
			if res.Outcome != tt.want.outcome || dec.Action != tt.want.action {
				t.Fatalf("outcome %v → %v, want %v → %v (reason %q)", res.Outcome, dec.Action, tt.want.outcome, tt.want.action, res.Reason)
			}
			if res.Alert != tt.want.alert {
				t.Fatalf("alert = %v, want %v (reason %q)", res.Alert, tt.want.alert, res.Reason)
			}
			if got := br.Status().Failures - before; (got > 0) != tt.want.failure {
				t.Fatalf("failures counted by the breaker: %d, want counted=%v", got, tt.want.failure)
			}
			rec, err := guard.Get(context.Background(), c.ID)
			if err != nil {
				t.Fatalf("record: %v", err)
			}
			if rec.State != tt.want.state {
				t.Fatalf("record state %s, want %s (never FAILED unless declined)", rec.State, tt.want.state)
			}
			now := guard.Now()
			switch tt.want.lease {
			case "kept":
				if !rec.LeaseLive(now) || dec.RetryAfter < boundaryLease-5*time.Second {
					t.Fatalf("lease live %v, retry after %s: the claim must be kept and the message come back after it", rec.LeaseLive(now), dec.RetryAfter)
				}
				again, err := guard.Claim(context.Background(), c.ID, c.Fingerprint(nil))
				if err != nil || again.Outcome != idempotency.DuplicateInProgress {
					t.Fatalf("a redelivery during the kept lease: %v %v, want duplicate_in_progress", again.Outcome, err)
				}
			case "given up":
				if rec.LeaseLive(now) || dec.RetryAfter != 0 {
					t.Fatalf("lease live %v, retry after %s: a request that never left gives the claim up", rec.LeaseLive(now), dec.RetryAfter)
				}
				again, err := guard.Claim(context.Background(), c.ID, c.Fingerprint(nil))
				if err != nil || again.Outcome != idempotency.Reclaimed {
					t.Fatalf("the next delivery: %v %v, want reclaimed at once", again.Outcome, err)
				}
			}
		})
	}
}

// readThenVanish is a bank that answers one request (a health check) on a
// keep-alive connection, then reads the next request whole — it reached
// the bank — and vanishes: the connection drops without an answer and
// nothing listens any more. Go's transport re-sends a request carrying an
// Idempotency-Key on a new connection after such a drop; that re-dial is
// refused, and the error then looks like a request that never left.
func readThenVanish(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		if r, err = http.ReadRequest(br); err == nil {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		ln.Close()
	}()
	return "http://" + ln.Addr().String()
}
