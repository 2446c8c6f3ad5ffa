package corebank

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/finedge/idempotent-consumer/charge"
)

// The simulator's HTTP API (documented in the README):
//
//	POST /v1/debits        Idempotency-Key header + DebitBody → 201 (posted) or
//	                       200 (replay of the same key and body, header
//	                       Idempotent-Replayed: true); 422 for a decline or a
//	                       key reused with another body; 503 injected outage
//	GET  /v1/ledger        every posting, with its idempotency key
//	PUT  /v1/faults        replace the injected faults (FaultsBody)
//	POST /v1/reset         forget every posting
//	GET  /healthz          200
const (
	IdempotencyHeader = "Idempotency-Key"
	ReplayedHeader    = "Idempotent-Replayed"
)

// DebitBody is the JSON body of POST /v1/debits.
type DebitBody struct {
	AccountID  string    `json:"accountId"`
	Amount     MoneyBody `json:"amount"`
	ChargeType string    `json:"chargeType"`
	Narrative  string    `json:"narrative,omitempty"`
}

// MoneyBody is integer minor units and an ISO-4217 code.
type MoneyBody struct {
	Minor    int64  `json:"minor"`
	Currency string `json:"currency"`
}

// DebitResponse is the body of a 200/201.
type DebitResponse struct {
	Reference      string `json:"reference"`
	IdempotencyKey string `json:"idempotencyKey"`
	Status         string `json:"status"`
}

// ErrorResponse is the body of every 4xx/5xx.
type ErrorResponse struct {
	Error   string `json:"error"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// LedgerResponse is the body of GET /v1/ledger.
type LedgerResponse struct {
	Count   int     `json:"count"`
	Entries []Entry `json:"entries"`
	// DuplicateRequests counts, per idempotency key, debit requests that
	// arrived after the debit had been confirmed (absorbed by the key).
	DuplicateRequests map[string]int `json:"duplicateRequests"`
}

// FaultsBody is the body of PUT /v1/faults (rates 0-1, latency in ms).
type FaultsBody struct {
	LatencyMS              int64             `json:"latencyMs"`
	DeclineAccounts        map[string]string `json:"declineAccounts,omitempty"`
	TransientRate          float64           `json:"transientRate"`
	TransientAfterPostRate float64           `json:"transientAfterPostRate"`
	TimeoutRate            float64           `json:"timeoutRate"`
}

// Handler serves the simulator's API over l.
func Handler(l *Ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/debits", func(w http.ResponseWriter, r *http.Request) { debit(l, w, r) })
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		e := l.Entries()
		if e == nil {
			e = []Entry{}
		}
		writeJSON(w, http.StatusOK, LedgerResponse{Count: len(e), Entries: e, DuplicateRequests: l.DuplicateRequests()})
	})
	mux.HandleFunc("PUT /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var f FaultsBody
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: "BAD_REQUEST", Message: err.Error()})
			return
		}
		l.SetFaults(f.Faults())
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/reset", func(w http.ResponseWriter, r *http.Request) {
		l.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// Faults converts the wire form.
func (f FaultsBody) Faults() Faults {
	return Faults{
		Latency:                durationMS(f.LatencyMS),
		DeclineAccounts:        f.DeclineAccounts,
		TransientRate:          f.TransientRate,
		TransientAfterPostRate: f.TransientAfterPostRate,
		TimeoutRate:            f.TimeoutRate,
	}
}

func debit(l *Ledger, w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(IdempotencyHeader)
	if key == "" {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: "BAD_REQUEST", Message: "the " + IdempotencyHeader + " header is required"})
		return
	}
	var b DebitBody
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: "BAD_REQUEST", Message: err.Error()})
		return
	}
	cur := charge.Currency(b.Amount.Currency)
	if b.AccountID == "" || b.Amount.Minor <= 0 || !cur.Valid() {
		writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: "BAD_REQUEST", Message: "accountId, a positive amount.minor and an ISO-4217 amount.currency are required"})
		return
	}
	receipt, replayed, err := l.debit(r.Context(), charge.DebitRequest{
		IdempotencyKey: key, AccountID: b.AccountID, Amount: charge.Money{Minor: b.Amount.Minor, Currency: cur},
		ChargeType: charge.Type(b.ChargeType), Narrative: b.Narrative,
	})
	var decline *charge.DeclineError
	switch {
	case err == nil:
		status := http.StatusCreated
		if replayed {
			status = http.StatusOK
			w.Header().Set(ReplayedHeader, "true")
		}
		writeJSON(w, status, DebitResponse{Reference: receipt.Reference, IdempotencyKey: key, Status: "POSTED"})
	case errors.As(err, &decline):
		writeJSON(w, http.StatusUnprocessableEntity, ErrorResponse{Error: "DECLINED", Code: decline.Code, Message: decline.Message})
	case errors.Is(err, ErrKeyReuse):
		writeJSON(w, http.StatusUnprocessableEntity, ErrorResponse{Error: "IDEMPOTENCY_KEY_REUSED", Message: err.Error()})
	case r.Context().Err() != nil:
		// The caller gave up; nobody reads this.
	default:
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse{Error: "UNAVAILABLE", Message: err.Error()})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func statusError(status int, e ErrorResponse) error {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	return fmt.Errorf("corebank: HTTP %s: %s: %s", strconv.Itoa(status), e.Error, msg)
}
