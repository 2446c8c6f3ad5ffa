// Command payments-api is an example server behind the Idempotency-Key
// middleware (package idemhttp) on the embedded SQLite store: a payment is
// made once per key, however often the client retries.
//
//	go run ./examples/payments-api --addr 127.0.0.1:8080 --db payments.db [--work-delay 2s]
//
//	curl -i -X POST http://127.0.0.1:8080/payments \
//	  -H 'Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324' \
//	  -H 'Content-Type: application/json' \
//	  -d '{"amount": {"minor": 2500, "currency": "INR"}, "account": "0012345678901", "memo": "locker rent"}'
//
// The first POST makes a payment (201, a new id, after --work-delay); the
// same POST again gets the same answer with "Idempotent-Replayed: true",
// also after a restart on the same --db; the same key with another body
// gets 422; a POST while the first still runs gets 409; a POST without a
// key gets 400. A key lives for the store's retention (--retention,
// default 24h). Fingerprints are keyed (HMAC-SHA-256) with
// --fingerprint-key-file, or with DB.fingerprint-key, created owner-only
// on first start and reused. It prints "listening on http://ADDR" once it serves, and
// stops on SIGINT or SIGTERM after the requests in flight.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/finedge/idempotent-consumer/idemhttp"
	"github.com/finedge/idempotent-consumer/idempotency"
	"github.com/finedge/idempotent-consumer/internal/secretfile"
	"github.com/finedge/idempotent-consumer/sqlite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments-api:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on (port 0: any free port)")
	dbPath := flag.String("db", "", "SQLite database file (created if missing; required)")
	workDelay := flag.Duration("work-delay", 0, "how long the simulated work of a payment takes")
	retention := flag.Duration("retention", 24*time.Hour, "how long a key is kept (its lifetime)")
	fpKey := flag.String("fingerprint-key-file", "", "owner-only file with a secret of 32+ bytes to key the request fingerprints (HMAC-SHA-256); default DB.fingerprint-key, created (mode 0600) on first start")
	flag.Parse()
	if *dbPath == "" || flag.NArg() > 0 || *workDelay < 0 {
		flag.Usage()
		return errors.New("--db is required; --work-delay must not be negative")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := sqlite.Open(ctx, *dbPath, sqlite.OpenOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	guard, err := idempotency.NewGuard(sqlite.NewStore(db), idempotency.Options{Retention: *retention})
	if err != nil {
		return err
	}
	// The bodies hold account numbers: an unkeyed fingerprint of one is
	// reversed by trying every account number, so fingerprints are always
	// keyed.
	var k []byte
	if *fpKey != "" {
		k, err = secretfile.Read(*fpKey)
	} else {
		k, err = defaultFingerprintKey(*dbPath + ".fingerprint-key")
	}
	if err != nil {
		return err
	}
	fp, err := idempotency.NewFingerprinter(k)
	if err != nil {
		return err
	}
	mw, err := idemhttp.Middleware(idemhttp.Options{
		Guard:         guard,
		Namespace:     "payments-api",
		Fingerprinter: fp,
		// A refused request made no payment: a retry of it may run again.
		NotStarted: func(status int) bool { return status == http.StatusBadRequest },
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw(&payments{delay: *workDelay, log: log}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+*workDelay)
	defer cancel()
	return srv.Shutdown(sctx)
}

// defaultFingerprintKey reads the key at path, or creates it (owner-only,
// 32 random bytes as hex) when there is none; a key file others can read
// is refused.
func defaultFingerprintKey(path string) ([]byte, error) {
	k, err := secretfile.Read(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	k = []byte(hex.EncodeToString(b[:]))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return secretfile.Read(path) // another process made it first
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(k); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return k, nil
}

// payments makes a payment: the simulated work takes delay, and each run
// makes a new id.
type payments struct {
	delay time.Duration
	log   *slog.Logger
}

type amount struct {
	Minor    int64  `json:"minor"`
	Currency string `json:"currency"`
}

type paymentRequest struct {
	Amount  amount `json:"amount"`
	Account string `json:"account"`
	Memo    string `json:"memo"`
}

type payment struct {
	ID        string    `json:"id"`
	Amount    amount    `json:"amount"`
	Account   string    `json:"account"` // masked: the last four digits
	Memo      string    `json:"memo,omitempty"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

var (
	currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)
	accountRE  = regexp.MustCompile(`^[0-9]{6,34}$`)
)

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req paymentRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		badRequest(w, "the body is not a payment: "+err.Error())
		return
	}
	switch {
	case req.Amount.Minor <= 0:
		badRequest(w, "amount.minor must be a positive number of minor units")
		return
	case !currencyRE.MatchString(req.Amount.Currency):
		badRequest(w, "amount.currency must be an ISO 4217 code")
		return
	case !accountRE.MatchString(req.Account):
		badRequest(w, "account must be 6 to 34 digits")
		return
	case len(req.Memo) > 140:
		badRequest(w, "memo must have at most 140 bytes")
		return
	}
	// A run reclaimed from a crashed attempt: that attempt may have paid.
	// A real handler asks its bank (under a downstream key made of the
	// request's key and run.Generation) before paying again; the
	// simulation only says so.
	if run, ok := idemhttp.RunFrom(r.Context()); ok && run.Reclaimed {
		p.log.Warn("payment reclaimed from a crashed attempt: check downstream before paying again", "attempt", run.Lease.Attempt)
	}
	// The simulated work: it takes delay, and is not cancelled by a client
	// that goes away (idemhttp detaches the request's context).
	select {
	case <-time.After(p.delay):
	case <-r.Context().Done():
		http.Error(w, "cancelled", http.StatusServiceUnavailable)
		return
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	pay := payment{ID: "pay_" + hex.EncodeToString(b[:]), Amount: req.Amount, Account: "****" + req.Account[len(req.Account)-4:],
		Memo: req.Memo, Status: "made", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	p.log.Info("payment made", "id", pay.ID, "minor", pay.Amount.Minor, "currency", pay.Amount.Currency)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+pay.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(pay)
}

func badRequest(w http.ResponseWriter, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Bad request", "status": 400, "detail": detail})
}
