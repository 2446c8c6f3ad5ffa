// Command payments-api is an example server behind the Idempotency-Key
// middleware (package idemhttp) on the embedded SQLite store: a payment is
// made once per key and client, however often the client retries.
//
//	go run ./examples/payments-api --addr 127.0.0.1:8080 --db payments.db --clients-file clients [--work-delay 2s]
//
//	curl -i -X POST http://127.0.0.1:8080/payments \
//	  -H "Authorization: Bearer $TOKEN" \
//	  -H 'Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324' \
//	  -H 'Content-Type: application/json' \
//	  -d '{"amount": {"minor": 2500, "currency": "INR"}, "account": "0012345678901", "memo": "locker rent"}'
//
// Every client authenticates with a bearer token. The --clients-file
// (owner-only) has one client a line: its id, its token (at least 32
// characters) and the accounts it may pay from, separated by spaces;
// blank lines and lines starting with # are skipped:
//
//	alice 6f1c0f0a9e3b4d2c8a7e5f4b3c2d1e0f6a5b4c3d2e1f0a9b 0012345678901 0012345678902
//
// A request without a known token gets 401 (WWW-Authenticate: Bearer); a
// payment from an account that is not the client's gets 403. Keys are kept
// per client (idemhttp's Scope is the client's id): another client sending
// the same key and body runs the handler, and so its authorisation, and
// never gets the first client's payment back.
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
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
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
	"slices"
	"strings"
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
	clientsFile := flag.String("clients-file", "", "owner-only file of the clients, one a line: ID TOKEN ACCOUNT... (required)")
	flag.Parse()
	if *dbPath == "" || *clientsFile == "" || flag.NArg() > 0 || *workDelay < 0 {
		flag.Usage()
		return errors.New("--db and --clients-file are required; --work-delay must not be negative")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	clients, err := readClients(*clientsFile)
	if err != nil {
		return err
	}

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
		// Keys are the authenticated client's own: another client with
		// the same key and body is authorised (and refused) by the
		// handler, never handed this client's payment.
		Scope:     func(r *http.Request) string { return clientFrom(r.Context()).id },
		Challenge: challenge,
		// A refused request made no payment: a retry of it may run again.
		NotStarted: func(status int) bool { return status == http.StatusBadRequest || status == http.StatusForbidden },
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", clients.authenticate(mw(&payments{delay: *workDelay, log: log})))
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

// challenge is the WWW-Authenticate of a 401.
const challenge = `Bearer realm="payments-api"`

// client is one line of the clients file.
type client struct {
	id       string
	token    [sha256.Size]byte // SHA-256 of the token: compared in constant time whatever its length
	accounts []string
}

type clientList []client

type clientKey struct{}

// clientFrom is the authenticated client of a request (zero outside
// authenticate).
func clientFrom(ctx context.Context) client {
	c, _ := ctx.Value(clientKey{}).(client)
	return c
}

var clientIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// readClients reads the clients file (owner-only: it holds the tokens).
func readClients(path string) (clientList, error) {
	b, err := secretfile.Read(path)
	if err != nil {
		return nil, err
	}
	var cs clientList
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) < 3:
			return nil, fmt.Errorf("%s:%d: want ID TOKEN ACCOUNT (one or more accounts)", path, n)
		case !clientIDRE.MatchString(f[0]):
			return nil, fmt.Errorf("%s:%d: a client id is 1 to 64 letters, digits, '.', '_' or '-'", path, n)
		case len(f[1]) < 32:
			return nil, fmt.Errorf("%s:%d: client %s: a token has at least 32 characters", path, n, f[0])
		case slices.ContainsFunc(cs, func(c client) bool { return c.id == f[0] }):
			return nil, fmt.Errorf("%s:%d: client %s again", path, n, f[0])
		}
		for _, a := range f[2:] {
			if !accountRE.MatchString(a) {
				return nil, fmt.Errorf("%s:%d: client %s: an account is 6 to 34 digits", path, n, f[0])
			}
		}
		cs = append(cs, client{id: f[0], token: sha256.Sum256([]byte(f[1])), accounts: f[2:]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("%s: no clients", path)
	}
	return cs, nil
}

// authenticate lets a request through with its client in its context when
// its bearer token is a client's; else 401.
func (cs clientList) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var found client
		if ok && tok != "" {
			sum := sha256.Sum256([]byte(tok))
			for _, c := range cs { // every one compared: the time tells nothing
				if subtle.ConstantTimeCompare(sum[:], c.token[:]) == 1 {
					found = c
				}
			}
		}
		if found.id == "" {
			w.Header().Set("WWW-Authenticate", challenge)
			problem(w, http.StatusUnauthorized, "Unauthenticated", "send Authorization: Bearer TOKEN with a client's token")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, found)))
	})
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
	// Authorisation: a client pays only from its own accounts.
	if !slices.Contains(clientFrom(r.Context()).accounts, req.Account) {
		problem(w, http.StatusForbidden, "Forbidden", "the account is not one this client may pay from")
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
	p.log.Info("payment made", "id", pay.ID, "client", clientFrom(r.Context()).id, "minor", pay.Amount.Minor, "currency", pay.Amount.Currency)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/"+pay.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(pay)
}

func badRequest(w http.ResponseWriter, detail string) {
	problem(w, http.StatusBadRequest, "Bad request", detail)
}

func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}
