package corebanksim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/finedge/idempotent-consumer/app/charge"
	"github.com/finedge/idempotent-consumer/app/corebank"
	"github.com/finedge/idempotent-consumer/app/reconcile/statement"
)

// DefaultCollectionAccount is the statement's account when none is asked.
const DefaultCollectionAccount = "FEES-COLLECTION"

// ParseStatementTime reads a statement bound: YYYY-MM-DD (midnight UTC) or
// RFC 3339.
func ParseStatementTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want YYYY-MM-DD or RFC 3339", s)
	}
	return t, nil
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, corebank.ErrorResponse{Error: "BAD_REQUEST", Message: msg})
}

// serveStatement answers GET /v1/statement.
func serveStatement(l *Ledger, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var p statement.Period
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"from", &p.From}, {"to", &p.To}} {
		v := q.Get(b.name)
		if v == "" {
			badRequest(w, b.name+": required")
			return
		}
		t, err := ParseStatementTime(v)
		if err != nil {
			badRequest(w, b.name+": "+err.Error())
			return
		}
		*b.t = t
	}
	if !p.From.Before(p.To) {
		badRequest(w, "from must be before to")
		return
	}
	format := q.Get("format")
	if format == "" {
		format = "camt053"
	}
	if !slices.Contains([]string{"camt053", "csv"}, format) {
		badRequest(w, fmt.Sprintf("format %q: want camt053 or csv", format))
		return
	}
	account := q.Get("account")
	if account == "" {
		account = DefaultCollectionAccount
	}
	postings := l.Statement(p.From, p.To)
	var buf bytes.Buffer
	var err error
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		err = statement.WriteCSV(&buf, slices.Values(postings))
	} else {
		w.Header().Set("Content-Type", "application/xml")
		now := time.Now().UTC()
		err = statement.WriteCamt053(&buf, statement.StatementInfo{
			ID: "SIM-" + now.Format("20060102T150405"), Account: account, Period: p, Created: now,
		}, postings)
	}
	if err != nil {
		w.Header().Del("Content-Type")
		writeJSON(w, http.StatusInternalServerError, corebank.ErrorResponse{Error: "INTERNAL", Message: err.Error()})
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// ledgerAction answers a reverse or drop: 204, or 404 for an unknown key.
func ledgerAction(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrUnknownKey):
		writeJSON(w, http.StatusNotFound, corebank.ErrorResponse{Error: "NOT_FOUND", Message: err.Error()})
	default:
		writeJSON(w, http.StatusConflict, corebank.ErrorResponse{Error: "CONFLICT", Message: err.Error()})
	}
}

// The simulator serves the core-banking API of package corebank (its wire
// format: corebank.DebitBody, corebank.StatusResponse, …) and an admin API
// of its own:
//
//	GET  /v1/ledger        every posting, with its idempotency key
//	PUT  /v1/faults        replace the injected faults (FaultsBody)
//	POST /v1/reset         forget every posting
//	GET  /v1/statement     the ledger as a bank statement of a period:
//	                       ?from=&to= (RFC 3339 or YYYY-MM-DD, to exclusive)
//	                       &format=camt053|csv &account= (the collection
//	                       account, default FEES-COLLECTION)
//	POST /v1/ledger/{key}/reverse  the bank reverses the posting
//	POST /v1/ledger/{key}/drop     the bank loses the posting
//	GET  /healthz          200, or the outage window's status

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
	// InProgress409: answer 409 to a key whose earlier request still runs.
	InProgress409 bool `json:"inProgress409"`
	// SlowRate of posts take SlowMS and post even after the caller gave up.
	SlowRate float64 `json:"slowRate"`
	SlowMS   int64   `json:"slowMs"`
	// BadGatewayAfterPostRate: post, then answer 502.
	BadGatewayAfterPostRate float64 `json:"badGatewayAfterPostRate"`
	// ResetAfterPostRate: post, then drop the connection.
	ResetAfterPostRate float64 `json:"resetAfterPostRate"`
	// OutageStatus for OutageMS from now (401 or 503, say): every call,
	// enquiry and health check answers it.
	OutageStatus int   `json:"outageStatus,omitempty"`
	OutageMS     int64 `json:"outageMs,omitempty"`
	// OutageHealthy: /healthz answers 200 through the outage (it lies).
	OutageHealthy bool `json:"outageHealthy,omitempty"`
	// PendingRate of debits answer 202 PENDING and post PendingMS later.
	PendingRate float64 `json:"pendingRate,omitempty"`
	PendingMS   int64   `json:"pendingMs,omitempty"`
}

// Handler serves the simulator's API over l.
func Handler(l *Ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/debits", func(w http.ResponseWriter, r *http.Request) { debit(l, w, r) })
	mux.HandleFunc("GET /v1/debits/{key}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		e, err := l.Status(key)
		if err != nil {
			writeFault(w, err)
			return
		}
		switch e.State {
		case charge.DebitPosted:
			writeJSON(w, http.StatusOK, corebank.StatusResponse{IdempotencyKey: key, Status: corebank.StatusPosted, Reference: e.Reference})
		case charge.DebitInProgress:
			writeJSON(w, http.StatusOK, corebank.StatusResponse{IdempotencyKey: key, Status: corebank.StatusInProgress})
		case charge.DebitDeclined:
			writeJSON(w, http.StatusOK, corebank.StatusResponse{IdempotencyKey: key, Status: corebank.StatusDeclined, Code: e.Decline.Code, Message: e.Decline.Message})
		default:
			writeJSON(w, http.StatusNotFound, corebank.StatusResponse{IdempotencyKey: key, Status: corebank.StatusNotFound, Error: "NOT_FOUND"})
		}
	})
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
			writeJSON(w, http.StatusBadRequest, corebank.ErrorResponse{Error: "BAD_REQUEST", Message: err.Error()})
			return
		}
		l.SetFaults(f.Faults(time.Now()))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/reset", func(w http.ResponseWriter, r *http.Request) {
		l.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/statement", func(w http.ResponseWriter, r *http.Request) { serveStatement(l, w, r) })
	mux.HandleFunc("POST /v1/ledger/{key}/reverse", func(w http.ResponseWriter, r *http.Request) {
		ledgerAction(w, l.Reverse(r.PathValue("key")))
	})
	mux.HandleFunc("POST /v1/ledger/{key}/drop", func(w http.ResponseWriter, r *http.Request) {
		ledgerAction(w, l.Drop(r.PathValue("key")))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := l.Health(); err != nil {
			writeFault(w, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// Faults converts the wire form; an outage window starts at now.
func (f FaultsBody) Faults(now time.Time) Faults {
	out := Faults{
		Latency:                 durationMS(f.LatencyMS),
		DeclineAccounts:         f.DeclineAccounts,
		TransientRate:           f.TransientRate,
		TransientAfterPostRate:  f.TransientAfterPostRate,
		TimeoutRate:             f.TimeoutRate,
		InProgress409:           f.InProgress409,
		SlowRate:                f.SlowRate,
		SlowLatency:             durationMS(f.SlowMS),
		BadGatewayAfterPostRate: f.BadGatewayAfterPostRate,
		ResetAfterPostRate:      f.ResetAfterPostRate,
		OutageHealthy:           f.OutageHealthy,
		PendingRate:             f.PendingRate,
		PendingLatency:          durationMS(f.PendingMS),
	}
	if f.OutageStatus != 0 && f.OutageMS > 0 {
		out.OutageStatus, out.OutageUntil = f.OutageStatus, now.Add(durationMS(f.OutageMS))
	}
	return out
}

func debit(l *Ledger, w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(corebank.IdempotencyHeader)
	if key == "" {
		writeJSON(w, http.StatusBadRequest, corebank.ErrorResponse{Error: "BAD_REQUEST", Message: "the " + corebank.IdempotencyHeader + " header is required"})
		return
	}
	var b corebank.DebitBody
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeJSON(w, http.StatusBadRequest, corebank.ErrorResponse{Error: "BAD_REQUEST", Message: err.Error()})
		return
	}
	cur := charge.Currency(b.Amount.Currency)
	if b.AccountID == "" || b.Amount.Minor <= 0 || !cur.Valid() {
		writeJSON(w, http.StatusBadRequest, corebank.ErrorResponse{Error: "BAD_REQUEST", Message: "accountId, a positive amount.minor and an ISO-4217 amount.currency are required"})
		return
	}
	receipt, replayed, err := l.debit(r.Context(), charge.DebitRequest{
		IdempotencyKey: key, AccountID: b.AccountID, Amount: charge.Money{Minor: b.Amount.Minor, Currency: cur},
		ChargeType: charge.Type(b.ChargeType), Narrative: b.Narrative,
	})
	var decline *charge.DeclineError
	var fault *FaultError
	switch {
	case errors.As(err, &fault):
		writeFault(w, fault)
	case errors.Is(err, ErrPending):
		writeJSON(w, http.StatusAccepted, corebank.DebitResponse{IdempotencyKey: key, Status: "PENDING"})
	case errors.Is(err, ErrInProgress):
		writeJSON(w, http.StatusConflict, corebank.ErrorResponse{Error: "REQUEST_IN_PROGRESS", Message: err.Error()})
	case err == nil:
		status := http.StatusCreated
		if replayed {
			status = http.StatusOK
			w.Header().Set(corebank.ReplayedHeader, "true")
		}
		writeJSON(w, status, corebank.DebitResponse{Reference: receipt.Reference, IdempotencyKey: key, Status: "POSTED"})
	case errors.As(err, &decline):
		writeJSON(w, http.StatusUnprocessableEntity, corebank.ErrorResponse{Error: "DECLINED", Code: decline.Code, Message: decline.Message})
	case errors.Is(err, ErrKeyReuse):
		writeJSON(w, http.StatusUnprocessableEntity, corebank.ErrorResponse{Error: "IDEMPOTENCY_KEY_REUSED", Message: err.Error()})
	case r.Context().Err() != nil:
		// The caller gave up; nobody reads this.
	default:
		writeJSON(w, http.StatusServiceUnavailable, corebank.ErrorResponse{Error: "UNAVAILABLE", Message: err.Error()})
	}
}

// writeFault answers an injected fault: its status, or a dropped
// connection.
func writeFault(w http.ResponseWriter, err error) {
	var f *FaultError
	if !errors.As(err, &f) {
		writeJSON(w, http.StatusServiceUnavailable, corebank.ErrorResponse{Error: "UNAVAILABLE", Message: err.Error()})
		return
	}
	if f.Reset {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // drops the connection where hijacking is not possible
	}
	writeJSON(w, f.Status, corebank.ErrorResponse{Error: f.Code, Message: "injected fault"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func statusError(status int, e corebank.ErrorResponse) error {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	return fmt.Errorf("corebank: HTTP %s: %s: %s", strconv.Itoa(status), e.Error, msg)
}

func durationMS(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
